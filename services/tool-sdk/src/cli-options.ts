// What the command-line tools share: a usage error (one line, exit 2) and a checked number option.

/** parseArgs options of the tools that can print JSON: --json, and --help (-h). */
export const CLI_FLAGS = { json: { type: "boolean" }, help: { type: "boolean", short: "h" } } as const;

/** A wrong argument or a missing key: one line, exit 2. */
export class UsageError extends Error {}

/** `--name`'s value as a number within min..max (a whole one when `integer`), `fallback` when absent. */
export function numberOption(
  value: string | undefined,
  name: string,
  fallback: number,
  min: number,
  max: number,
  integer = true,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n)))
    throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} in ${min}..${max}, got "${value}"`);
  return n;
}
