// Deploy config's SLO numbers per method ("tool/Method" → p95TargetMs, errorRateBudget), checked so
// that a typo fails the generator, not the page; the contract's numbers stay the default.

export interface SloOverride {
  readonly p95TargetMs?: number;
  readonly errorRateBudget?: number;
}

/** Keyed "tool/Method", e.g. "kb-search/Search". */
export type SloOverrides = Readonly<Record<string, SloOverride>>;

/** Validates an overrides document (parsed JSON) so that a typo fails the generator, not the page. */
export function parseSloOverrides(document: unknown, source = "SLO overrides"): SloOverrides {
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new Error(`${source}: expected an object keyed "tool/Method"`);
  }
  const overrides: Record<string, SloOverride> = {};
  for (const [key, value] of Object.entries(document)) {
    if (!/^[a-z][a-z0-9-]*\/[A-Z][A-Za-z0-9]*$/.test(key))
      throw new Error(`${source}: key "${key}" is not "tool/Method"`);
    if (typeof value !== "object" || value === null || Array.isArray(value))
      throw new Error(`${source}: "${key}" must be an object`);
    const { p95TargetMs, errorRateBudget, ...unknown } = value as Record<string, unknown>;
    const extra = Object.keys(unknown);
    if (extra.length > 0)
      throw new Error(
        `${source}: "${key}" has unknown fields ${extra.join(", ")} (allowed: p95TargetMs, errorRateBudget)`,
      );
    if (
      p95TargetMs !== undefined &&
      (typeof p95TargetMs !== "number" || !Number.isInteger(p95TargetMs) || p95TargetMs <= 0)
    ) {
      throw new Error(`${source}: "${key}".p95TargetMs must be a positive integer`);
    }
    if (
      errorRateBudget !== undefined &&
      (typeof errorRateBudget !== "number" || !(errorRateBudget > 0 && errorRateBudget < 1))
    ) {
      throw new Error(`${source}: "${key}".errorRateBudget must be a number between 0 and 1 (exclusive)`);
    }
    overrides[key] = {
      ...(p95TargetMs === undefined ? {} : { p95TargetMs }),
      ...(errorRateBudget === undefined ? {} : { errorRateBudget }),
    };
  }
  return overrides;
}
