// `pnpm bench live`: 10,000 sessions in flight on one orchestrator (SQLite), all of them waiting —
// most on a human's approval (one-call refunds: the host sends every irreversible call of the
// single-call policy to another person), the rest on a model that holds its answer (an
// OpenAI-compatible endpoint that does not reply until released). billing, risk and the
// orchestrator run as real processes. Printed: what the orchestrator holds (RSS, heap, handles,
// descriptors) and spends while nothing happens (CPU over LIVE_IDLE_MS) with 0 sessions, with all
// of them waiting, and with a WatchSession stream open on every one; then how long a released wait
// (an approval, a model answer) takes to reach its watcher. The caller quota is raised to exactly
// the sessions started, and one more start is shown refused by it.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { freePort, type ServiceProcess } from "@loopguard/test-kit";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, metricValue, type RawClient } from "@loopguard/tool-sdk";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import { startHeldModel } from "./held-model.js";
import { cpuSecondsOf, holding, holdingRow, idleCpu, metricsPage, percentile, quiet, until } from "./live-probe.js";
import { loadAverage } from "./measure.js";
import { benchPeople } from "./people.js";
import { entryOf, stopAll } from "./processes.js";
import { openWatches, type Watched } from "./live-watch.js";

const SESSIONS = Number(process.env.LIVE_SESSIONS ?? 10_000);
/** Sessions waiting on the model; each holds a driven slot and an HTTP request, the others hold nothing but rows. */
const ON_MODEL = Math.round(SESSIONS * Number(process.env.LIVE_MODEL_SHARE ?? 0.25));
const IDLE_MS = Number(process.env.LIVE_IDLE_MS ?? 30_000);
/** Waits released per kind, one at a time, each timed from its release to its watcher's update. */
const RELEASED = 200;
const STARTING_AT_ONCE = 64;
const ORDER = "ord_DEMO00000002";
const REFUND_SCOPES = ["billing:read", "billing:refund", "risk:read"];
const TAG = /bench-live-\d+/;
const tagOf = (i: number) => `bench-live-${String(i).padStart(5, "0")}`;

export async function benchLive(): Promise<void> {
  console.log(
    `live: ${SESSIONS} sessions (${SESSIONS - ON_MODEL} on an approval, ${ON_MODEL} on the model); load average ${loadAverage()}`,
  );
  const began = performance.now();
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-live-"));
  const procs: ServiceProcess[] = [];
  const people = benchPeople();
  const model = await startHeldModel(TAG);
  // The orchestrator's inspector, through which the bench has it collect garbage before each reading.
  const inspectPort = await freePort();
  const tool = async (service: string, prefix: string, env: Record<string, string> = {}) => {
    const proc = await spawnTool(entryOf(service), {
      ...people.env,
      [`${prefix}_PORT`]: "0",
      [`${prefix}_METRICS_PORT`]: "0",
      LOOPGUARD_DATA_DIR: join(dataDir, service),
      ...env,
    });
    procs.push(proc);
    return proc;
  };
  try {
    const billing = await tool("billing", "BILLING", { BILLING_MAX_CONCURRENT: "512" });
    const risk = await tool("risk", "RISK", {
      RISK_MAX_CONCURRENT: "512",
      RISK_CUSTOMER_KEY_PEPPER: "bench-risk-customer-key-pepper-0123456789abcdef",
    });
    const orchestrator = await tool("orchestrator", "ORCHESTRATOR", {
      ...people.orchestratorEnv,
      ORCHESTRATOR_HTTP_PORT: "0",
      ORCHESTRATOR_STORE: `sqlite:${join(dataDir, "orchestrator.db")}`,
      BILLING_ADDR: billing.address,
      RISK_ADDR: risk.address,
      // No session here searches; this address is never dialled.
      KB_SEARCH_ADDR: "127.0.0.1:9",
      OPENAI_BASE_URL: model.baseUrl,
      OPENAI_MODEL: "bench-held",
      // The bench decides when the model answers, within the run's few minutes.
      MODEL_TIMEOUT_MS: "600000",
      // Raised, not removed: exactly the sessions this bench keeps in flight (one more is refused below).
      ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(SESSIONS),
      // A session waiting on the model is being driven: it holds a slot (approvals hold none).
      ORCHESTRATOR_MAX_ACTIVE_SESSIONS: String(ON_MODEL + 256),
      // One watch stream per session, all of them the one bench caller's.
      ORCHESTRATOR_MAX_STREAMS: String(SESSIONS + 64),
      ORCHESTRATOR_MAX_STREAMS_PER_CALLER: String(SESSIONS + 64),
      // Its "serving" line, which the bench waits for, is an info line.
      LOG_LEVEL: "info",
      NODE_OPTIONS: `--inspect=127.0.0.1:${inspectPort}`,
    });
    const requester = await people.token(
      "requester",
      ["sessions:read", "sessions:write", ...[...REFUND_SCOPES, "kb:read"].map((s) => `grant:${s}`)],
      "orchestrator",
    );
    const api = createRawClient(OrchestratorService, orchestrator.address, { token: requester });
    const approver = createRawClient(OrchestratorService, orchestrator.address, {
      token: await people.token("approver", ["sessions:read", "approvals:write"], "orchestrator"),
    });
    try {
      // The tokenizer loads once serving; let it, and the first sweeps, pass before measuring.
      await sleep(5000);
      console.log("  orchestrator, 0 sessions, nothing happening:");
      const idle0 = await holding(orchestrator, inspectPort);
      console.log(holdingRow("holds", idle0));
      const cpu0 = await idleCpu(orchestrator, IDLE_MS);
      console.log(`  CPU over ${IDLE_MS / 1000} s idle: ${cpu0.toFixed(2)} ms/s\n`);

      const ids: string[] = new Array(SESSIONS);
      const cpuBefore = cpuSecondsOf(orchestrator.child.pid!);
      const started = performance.now();
      let next = 0;
      const starter = async () => {
        for (let i = next++; i < SESSIONS; i = next++) {
          const { session } = await api.startSession(
            i < ON_MODEL
              ? {
                  goal: `How do refunds work? (${tagOf(i)})`,
                  task: {},
                  scopes: ["kb:read"],
                  budget: { maxWallClockMs: 600_000 },
                  policy: "openai",
                }
              : {
                  goal: `Refund 0.01 of the bulk order (${tagOf(i)})`,
                  task: {
                    kind: "tool_call",
                    tool: "billing_refund",
                    order_id: ORDER,
                    amount_cents: 1,
                    arguments: { orderId: ORDER, amountCents: 1, reason: "REFUND_REASON_DAMAGED" },
                  } as never,
                  scopes: REFUND_SCOPES,
                  budget: { maxToolCalls: 1, maxWallClockMs: 600_000 },
                  policy: "single-call",
                },
          );
          ids[i] = session!.sessionId;
        }
      };
      await Promise.all(Array.from({ length: STARTING_AT_ONCE }, starter));
      const waitingOnApproval = async () =>
        metricValue(await metricsPage(orchestrator), "loopguard_sessions", { state: "AWAITING_APPROVAL" });
      const settled = await until(
        async () => model.held === ON_MODEL && (await waitingOnApproval()) === SESSIONS - ON_MODEL,
        120_000,
      );
      const startSeconds = (performance.now() - started) / 1000;
      const startCpuMs = (cpuSecondsOf(orchestrator.child.pid!) - cpuBefore) * 1000;
      console.log(
        `  started ${SESSIONS} in ${startSeconds.toFixed(1)} s (${(SESSIONS / startSeconds).toFixed(0)}/s, ${(startCpuMs / SESSIONS).toFixed(2)} ms orchestrator CPU each, ${STARTING_AT_ONCE} starts at once); ${settled ? "all waiting" : "NOT all waiting"}: ${await waitingOnApproval()} on an approval, ${model.held} on the model`,
      );
      await quotaHolds(api);
      await sleep(3000);

      console.log(`  orchestrator, ${SESSIONS} sessions waiting, nothing happening:`);
      const live = await holding(orchestrator, inspectPort);
      console.log(holdingRow("holds", live));
      const cpu1 = await idleCpu(orchestrator, IDLE_MS);
      const live2 = await holding(orchestrator, inspectPort);
      console.log(holdingRow(`holds after ${IDLE_MS / 1000} s`, live2));
      console.log(
        `  CPU over ${IDLE_MS / 1000} s idle: ${cpu1.toFixed(2)} ms/s; per waiting session: RSS ${perSession(live.rssBytes - idle0.rssBytes)}, heap used ${perSession(live.heapUsedBytes - idle0.heapUsedBytes)} (after the idle window: ${perSession(live2.rssBytes - idle0.rssBytes)}, ${perSession(live2.heapUsedBytes - idle0.heapUsedBytes)})\n`,
      );

      const watchFrom = performance.now();
      const watched = await openWatches(api, ids, (i) => (i < ON_MODEL ? "model" : "approval"));
      const opened = await until(() => watched.opened() === SESSIONS, 60_000);
      const openSeconds = (performance.now() - watchFrom) / 1000;
      // Each stream sends the session's history after its snapshot; the idle window starts once all of it arrived.
      const replaySeconds = openSeconds + (await quiet(watched.messages, 2000, 60_000)) / 1000;
      console.log(
        `  WatchSession on every session over one HTTP/2 connection: ${watched.opened()} of ${SESSIONS} open${opened ? "" : " (NOT all)"} after ${openSeconds.toFixed(1)} s, their ${watched.messages()} messages of snapshot and history received after ${replaySeconds.toFixed(1)} s, ${watched.failed().length} failed${watched.failed()[0] ? ` (first: ${watched.failed()[0]})` : ""}`,
      );
      const watching = await holding(orchestrator, inspectPort);
      console.log(holdingRow("holds with the watches", watching));
      const cpu2 = await idleCpu(orchestrator, IDLE_MS / 2);
      console.log(
        `  CPU over ${IDLE_MS / 2000} s idle with every session watched: ${cpu2.toFixed(2)} ms/s; per watch: RSS ${perSession(watching.rssBytes - live2.rssBytes)}, heap used ${perSession(watching.heapUsedBytes - live2.heapUsedBytes)}; updates delivered so far: ${watched.updates()}\n`,
      );

      await releaseAndTime(watched.all, model, approver);
      for (const [what, n] of watched.moved()) console.log(`    moved before its release: ${n} x ${what}`);
      printWarnings(orchestrator);
      console.log(
        `  load average at the end ${loadAverage()}; the run took ${((performance.now() - began) / 1000).toFixed(0)} s\n`,
      );
    } finally {
      api.close();
      approver.close();
    }
  } finally {
    await stopAll(procs, dataDir);
    await model.close();
  }
}

/** The orchestrator's warnings and errors of the run, by message, with the first one's error. */
function printWarnings(proc: ServiceProcess): void {
  const seen = new Map<string, { n: number; first: Record<string, unknown> }>();
  for (const line of proc.lines) {
    if (line.level !== "warn" && line.level !== "error") continue;
    const key = `${String(line.level)} ${String(line.msg)}`;
    const entry = seen.get(key) ?? { n: 0, first: line };
    entry.n += 1;
    seen.set(key, entry);
  }
  for (const [key, { n, first }] of seen)
    console.log(`  orchestrator log: ${n} x ${key} (first: ${String(first.error_message ?? first.reason ?? "")})`);
}

const perSession = (bytes: number) => `${(bytes / SESSIONS / 1024).toFixed(2)} KiB`;

/** One start past the raised quota: refused, so the bench raised it rather than switched it off. */
async function quotaHolds(api: RawClient<typeof OrchestratorService>): Promise<void> {
  const outcome = await api
    .startSession({ goal: "One too many", task: {}, scopes: ["kb:read"], policy: "openai" })
    .then(
      () => "STARTED (the quota did not hold)",
      (e: unknown) => (e instanceof CallError ? `refused ${e.reason}` : `failed ${String(e)}`),
    );
  console.log(`  session ${SESSIONS + 1} (quota ${SESSIONS} per caller): ${outcome}`);
}

/** Releases RELEASED model answers and then RELEASED approvals, one at a time, timing each to its watcher's update. */
async function releaseAndTime(
  all: readonly Watched[],
  model: Awaited<ReturnType<typeof startHeldModel>>,
  approver: RawClient<typeof OrchestratorService>,
): Promise<void> {
  const byTag = new Map(all.map((w, i) => [tagOf(i), w]));
  const models: Watched[] = [];
  for (let k = 0; k < RELEASED; k += 1) {
    for (const { tag, at } of model.release(1)) {
      const w = byTag.get(tag);
      if (w) {
        w.releasedAt = at;
        models.push(w);
      }
    }
    await sleep(5);
  }
  const approvals: Watched[] = [];
  for (const w of all.filter((x) => x.kind === "approval" && x.approval).slice(0, RELEASED)) {
    w.releasedAt = performance.now();
    await approver.resolveApproval({
      sessionId: w.id,
      approvalId: w.approval!.approvalId,
      argumentsHash: w.approval!.argumentsHash,
      approve: true,
      reason: "bench",
    });
    approvals.push(w);
  }
  await until(() => [...models, ...approvals].every((w) => w.updateAt !== undefined), 30_000);
  for (const [kind, released] of [
    ["a model answer", models],
    ["an approval", approvals],
  ] as const) {
    const ms = released.filter((w) => w.updateAt !== undefined).map((w) => w.updateAt! - w.releasedAt!);
    console.log(
      `  release -> pushed update, ${kind}: n=${ms.length} of ${released.length}  p50 ${percentile(ms, 0.5).toFixed(1)} ms  p99 ${percentile(ms, 0.99).toFixed(1)} ms  max ${Math.max(...ms).toFixed(1)} ms`,
    );
  }
}
