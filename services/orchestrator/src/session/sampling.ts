// Head sampling of session traces. A session's spans hang under a parent the host makes up (its
// trace id derived from the session id, so every run and replica adds to one trace), and the SDK's
// parent-based sampler follows that parent's flag. So the host sets the flag itself, deciding at the
// session's root by the configured ratio — the same TraceIdRatioBasedSampler the SDK would use, on
// the session's trace id, so every run of a session decides alike — whatever a caller's traceparent
// said. Sessions that may wait for a human (their scopes grant an irreversible tool, the only kind
// an approval stops) are always kept. Head sampling cannot know how a session ends: an unkept one
// that fails is recorded again afterwards from its stored steps (spans.ts, `rerecord`).
import { Effect } from "@loopguard/tool-sdk";
import { fractionSetting } from "@loopguard/tool-sdk";
import { ROOT_CONTEXT } from "@opentelemetry/api";
import { SamplingDecision, TraceIdRatioBasedSampler } from "@opentelemetry/sdk-trace-base";
import type { SessionRecord } from "../store/session-store.js";
import type { ToolRegistry } from "../tool-registry.js";

/** Why a session's trace is kept: by the ratio, as a session that may need approval, or (recorded afterwards) as one that failed. */
export type KeptBy = "ratio" | "approval" | "error";

/**
 * The ratio of ordinary sessions whose traces are kept, from the standard OTEL_TRACES_SAMPLER and
 * OTEL_TRACES_SAMPLER_ARG (the SDK's defaults: parent-based, always on). A ratio outside 0..1 stops
 * the process, where the SDK would quietly keep everything.
 */
export function sessionSampleRatio(env: Readonly<Record<string, string | undefined>>): number {
  const sampler = env.OTEL_TRACES_SAMPLER || "parentbased_always_on";
  if (sampler === "always_off" || sampler === "parentbased_always_off") return 0;
  if (sampler !== "traceidratio" && sampler !== "parentbased_traceidratio") return 1;
  return fractionSetting(env, "OTEL_TRACES_SAMPLER_ARG", 1, "a ratio");
}

export class SessionSampling {
  readonly #ratio: TraceIdRatioBasedSampler;
  /** Scopes that grant an irreversible tool: a session holding one may stop for an approval. */
  readonly #approvalScopes: ReadonlySet<string>;

  constructor(ratio: number, registry: ToolRegistry) {
    this.#ratio = new TraceIdRatioBasedSampler(ratio);
    this.#approvalScopes = new Set(
      registry
        .list()
        .filter((t) => t.effect === Effect.IRREVERSIBLE_EXTERNAL)
        .map((t) => t.requiredScope),
    );
  }

  /** Why the session's trace is kept at its root, or null when it is dropped. */
  keep(s: Pick<SessionRecord, "scopes"> | null, traceId: string): KeptBy | null {
    if (s?.scopes.some((scope) => this.#approvalScopes.has(scope))) return "approval";
    const decision = this.#ratio.shouldSample(ROOT_CONTEXT, traceId).decision;
    return decision === SamplingDecision.RECORD_AND_SAMPLED ? "ratio" : null;
  }
}
