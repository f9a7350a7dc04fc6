// Fault injection for drills, switchable at run time through ToolAdminService.SetFaults:
// added latency, a random error rate, a full outage, or answers held back after the handler ran
// (a lost response: the effect happened, the caller does not know), optionally for some methods.
import { create } from "@bufbuild/protobuf";
import { type FaultProfile, FaultProfileSchema } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";

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
