// The release gate on the local containers: the tool's smoke calls sent straight to the new pods
// (signed with the local suite's probe key), then the gate's SLO verdict computed from those pods'
// own /metrics pages over the window (local-measure.ts): no Prometheus needed. Run before the flip
// (the smoke calls are the only traffic) and again once the new set serves every client (their
// calls and a second round of smoke calls).
import { describeSmoke, readSigningKey, runSmoke, SMOKE_SUBJECT, smokeCount, smokeToken } from "@loopguard/tool-sdk";
import type { Pod } from "../local/suite/state.js";
import { type GateVerdict, gateVerdict, judgedMethods, type ReleaseGate } from "./gate.js";
import { measureLocally, type Reading, readPages } from "./local-measure.js";

/** Smoke calls in flight at once: enough to finish in a second or two, few enough not to shed. */
const SMOKE_CONCURRENCY = 4;

export interface LocalGate extends ReleaseGate {
  /** The local suite's probe key (.data/keys/smoke.jwk). */
  readonly keyFile: string;
  readonly grpcPort: number;
  readonly metricsPort: number;
}

/** The pages of `pods`, read now: where a gate's window starts. */
export function readingOf(gate: LocalGate, pods: readonly Pod[]): Promise<Reading> {
  return readPages(new Map(pods.map((p) => [p.name, `http://${p.address}:${gate.metricsPort}/metrics`])));
}

/** Smoke calls to `pods`, then the verdict over the window since `since` (read now when not given), with how many smoke calls were sent. */
export async function judgePods(
  gate: LocalGate,
  pods: readonly Pod[],
  since?: Reading,
): Promise<GateVerdict & { readonly smokeCalls: number }> {
  const before = since ?? (await readingOf(gate, pods));
  const token = await smokeToken(
    gate.call,
    readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: gate.keyFile }),
    SMOKE_SUBJECT,
    300,
  );
  const result = await runSmoke(gate.call, {
    targets: pods.map((p) => `${p.address}:${gate.grpcPort}`),
    token,
    count: smokeCount(gate.call),
    concurrency: SMOKE_CONCURRENCY,
    spreadMs: 0,
  });
  const after = await readingOf(gate, pods);
  const errorBudget = gate.call.errorRateBudget;
  const verdict = gateVerdict(judgedMethods(gate.slos), measureLocally(gate.slos, before, after), {
    result,
    errorBudget,
    line: describeSmoke(result, errorBudget),
  });
  return { ...verdict, smokeCalls: result.calls };
}
