// One parser for settings read from the environment: every service's config.ts names its variables
// and bounds, and a bad value is one ConfigError worded the same way (exit 2 before anything binds).

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

export type Env = Readonly<Record<string, string | undefined>>;

export interface IntegerBounds {
  readonly min: number;
  readonly max: number;
}

export interface IntegerSpec extends IntegerBounds {
  readonly default: number;
}

/** The variable's raw text, or undefined when it is unset or empty (the default applies). */
function rawOf(env: Env, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw === "" ? undefined : raw;
}

/** `name` as an integer in min..max, or undefined when unset. */
export function optionalIntegerSetting(env: Env, name: string, bounds: IntegerBounds): number | undefined {
  const raw = rawOf(env, name);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(value) || value < bounds.min || value > bounds.max)
    throw new ConfigError(`${name} must be an integer in ${bounds.min}..${bounds.max}, got "${raw}"`);
  return value;
}

/** `name` as an integer in min..max, or the spec's default when unset. */
export function integerSetting(env: Env, name: string, spec: IntegerSpec): number {
  return optionalIntegerSetting(env, name, spec) ?? spec.default;
}

/** `name` as a fraction in 0..1, or `fallback` when unset. */
export function fractionSetting(env: Env, name: string, fallback: number, what = "a number"): number {
  const raw = rawOf(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(value) || value < 0 || value > 1)
    throw new ConfigError(`${name} must be ${what} in 0..1, got "${raw}"`);
  return value;
}

/** `"a"`, `"a" or "b"`, `"a", "b" or "c"`: the values a setting accepts, as its error names them. */
function oneOf(values: readonly string[]): string {
  const quoted = values.map((v) => `"${v}"`);
  return quoted.length < 2 ? quoted.join("") : `${quoted.slice(0, -1).join(", ")} or ${quoted.at(-1)}`;
}

/** `name` as one of `values`, or `fallback` when unset. */
export function enumSetting<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = rawOf(env, name);
  if (raw === undefined) return fallback;
  if (!(values as readonly string[]).includes(raw))
    throw new ConfigError(`${name} must be ${oneOf(values)}, got "${raw}"`);
  return raw as T;
}

/** `name` as "true" or "false", or `fallback` when unset. */
export function booleanSetting(env: Env, name: string, fallback: boolean): boolean {
  return enumSetting(env, name, ["true", "false"], fallback ? "true" : "false") === "true";
}

/** `name` as "on" or "off" (a switch that is off unless turned on). */
export function switchSetting(env: Env, name: string): boolean {
  return enumSetting(env, name, ["on", "off"], "off") === "on";
}
