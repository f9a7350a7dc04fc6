// Fault injection for drills, switchable at run time through ToolAdminService.SetFaults, or set at
// start from LOOPGUARD_FAULT_PROFILE (the same profile as JSON, e.g. a release rehearsal's
// deliberately bad image): added latency, a random error rate, a full outage, or answers held back
// after the handler ran (a lost response: the effect happened, the caller does not know),
// optionally for some methods.
import { create, fromJsonString } from "@bufbuild/protobuf";
import { type FaultProfile, FaultProfileSchema } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { violationsOf } from "./validation.js";

export type FaultKind = "latency" | "error" | "outage";

export interface FaultDecision {
  readonly delayMs: number;
  /** Held after the handler ran, before its answer is sent. */
  readonly responseDelayMs: number;
  readonly fail: "error" | "outage" | undefined;
  readonly retryAfterMs: number | undefined;
}

export const NO_FAULT: FaultDecision = { delayMs: 0, responseDelayMs: 0, fail: undefined, retryAfterMs: undefined };

export class FaultSwitch {
  #profile: FaultProfile = create(FaultProfileSchema);

  constructor(private readonly random: () => number = Math.random) {}

  get profile(): FaultProfile {
    return this.#profile;
  }

  set(profile: FaultProfile): void {
    this.#profile = create(FaultProfileSchema, profile);
  }

  /** What to do to one call of `method` (its short name, e.g. "Search"). */
  decide(method: string): FaultDecision {
    const p = this.#profile;
    if (p.methods.length > 0 && !p.methods.includes(method)) return NO_FAULT;
    if (!p.outage && p.errorRate === 0 && p.addedLatencyMs === 0 && p.responseDelayMs === 0) return NO_FAULT;
    const retryAfterMs = p.retryAfterMs > 0 ? p.retryAfterMs : undefined;
    const fail = p.outage ? "outage" : p.errorRate > 0 && this.random() < p.errorRate ? "error" : undefined;
    return { delayMs: p.addedLatencyMs, responseDelayMs: p.responseDelayMs, fail, retryAfterMs };
  }
}

/**
 * A fault profile from its JSON form (protobuf JSON of FaultProfile, as SetFaults takes it, e.g.
 * `{"errorRate": 0.3, "methods": ["GetOrder"]}`), checked against the contract's rules. Throws an
 * Error whose message is one line saying what is wrong.
 */
export function parseFaultProfile(json: string): FaultProfile {
  let profile: FaultProfile;
  try {
    profile = fromJsonString(FaultProfileSchema, json);
  } catch (error) {
    throw new Error(
      `not a fault profile: ${(error as Error).message.replace(/^cannot decode message [\w.]+ from JSON: /, "")}`,
    );
  }
  const violations = violationsOf(FaultProfileSchema, profile);
  if (violations.length > 0) throw new Error(violations.map((v) => `${v.field}: ${v.description}`).join("; "));
  return profile;
}

/** What a log line says about a profile. */
export function faultSummary(p: FaultProfile): Record<string, unknown> {
  return {
    added_latency_ms: p.addedLatencyMs,
    response_delay_ms: p.responseDelayMs,
    error_rate: p.errorRate,
    outage: p.outage,
    retry_after_ms: p.retryAfterMs,
    methods: p.methods,
  };
}
