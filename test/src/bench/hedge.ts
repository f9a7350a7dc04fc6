// `pnpm bench hedge`: what hedged reads buy when one of three kb-search replicas is slow.
// Three kb-search processes, two orchestrator processes with KB_SEARCH_ADDR listing the three (one
// with hedged reads, one with ORCHESTRATOR_HEDGED_READS=false), question sessions (one Search, then
// the answer), SESSIONS per run with IN_FLIGHT in flight:
//   (a) healthy replicas, hedging orchestrator;
//   (b) one replica slowed 10× (added latency = 9× a Search's normal latency, through SetFaults), no hedging;
//   (c) the same slow replica, hedging orchestrator.
// kb-search answers a loopback Search in about a millisecond, where a real search backend takes tens:
// every replica gets BASE_MS of added latency in every run, so that "10× slower" is of a size a
// session notices. Printed: session p50/p95 of each run, (c)/(a) of the p95 (target <= 1.5) and the
// extra load of (c), hedges sent / kb-search calls (target <= 10 %), from the orchestrator's /metrics.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { metricValue, spawnTool, type ToolProcess } from "@loopguard/tool-sdk/testing";
import { benchPeople } from "./people.js";
import { entryOf, sessionEnds, stopAll } from "./processes.js";

const SESSIONS = 300;
const IN_FLIGHT = 16;
const WARM_UP_SESSIONS = 60;
const BASE_MS = 50;
const QUESTIONS = ["how do refunds work", "which refunds need an approval", "how long do card refunds take", "what cannot be returned", "what is the risk policy"];

interface Run {
  readonly label: string;
  readonly p50Ms: number;
  readonly p95Ms: number;
  readonly calls: number;
  readonly hedges: number;
  readonly hedgesWon: number;
}

const percentile = (sorted: readonly number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;

async function kbCounters(orchestrator: ToolProcess): Promise<{ calls: number; hedges: number; hedgesWon: number }> {
  const page = await (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
  const labels = { tool: "kb-search", method: "Search" };
  return {
    calls: metricValue(page, "loopguard_tool_client_calls_total", labels),
    hedges: metricValue(page, "loopguard_tool_client_hedges_total", labels),
    hedgesWon: metricValue(page, "loopguard_tool_client_hedges_won_total", labels),
  };
}

export async function benchHedge(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-hedge-"));
  const procs: ToolProcess[] = [];
  const people = benchPeople();
  const closers: (() => void)[] = [];
  try {
    const replicas: ToolProcess[] = [];
    for (let i = 0; i < 3; i++) {
      const kb = await spawnTool(entryOf("kb-search"), {
        ...people.env,
        KB_SEARCH_PORT: "0",
        KB_SEARCH_METRICS_PORT: "0",
        KB_SEARCH_MAX_CONCURRENT: "512",
        LOOPGUARD_DATA_DIR: join(dataDir, `kb-${i}`),
      });
      procs.push(kb);
      replicas.push(kb);
    }
    const adminToken = await people.token("operator", ["tool:admin"], "kb-search");
    const admins = replicas.map((r) => createRawClient(ToolAdminService, r.address, { token: adminToken }));
    closers.push(...admins.map((a) => () => a.close()));
    const setLatency = (index: number, ms: number) => admins[index]!.setFaults({ profile: { addedLatencyMs: ms } });
    for (let i = 0; i < 3; i++) await setLatency(i, BASE_MS);

    // A Search's normal latency, as a client sees it from here (connections made first).
    const kbToken = await people.token("operator", ["kb:read"]);
    const readers = replicas.map((r) => createRawClient(KbSearchService, r.address, { token: kbToken }));
    closers.push(...readers.map((c) => () => c.close()));
    const direct: number[] = [];
    for (let i = 0; i < 90; i++) {
      const started = performance.now();
      await readers[i % 3]!.search({ query: QUESTIONS[i % QUESTIONS.length]!, limit: 3 });
      if (i >= 30) direct.push(performance.now() - started);
    }
    const normalMs = percentile(
      direct.sort((a, b) => a - b),
      0.5,
    );

    const orchestrator = async (name: string, hedged: boolean) => {
      const proc = await spawnTool(entryOf("orchestrator"), {
        ...people.orchestratorEnv,
        ORCHESTRATOR_PORT: "0",
        ORCHESTRATOR_HTTP_PORT: "0",
        ORCHESTRATOR_STORE: `sqlite:${join(dataDir, `${name}.db`)}`,
        LOOPGUARD_DATA_DIR: join(dataDir, name),
        KB_SEARCH_ADDR: replicas.map((r) => r.address).join(","),
        // Question sessions call kb-search only; these addresses are never dialled.
        BILLING_ADDR: "127.0.0.1:9",
        RISK_ADDR: "127.0.0.1:9",
        LOG_LEVEL: "info",
        ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(IN_FLIGHT),
        ORCHESTRATOR_HEDGED_READS: String(hedged),
      });
      procs.push(proc);
      const endOf = sessionEnds(proc);
      const api = createRawClient(OrchestratorService, proc.address, { token: await people.token("requester", ["sessions:read", "sessions:write", "grant:kb:read"], "orchestrator") });
      closers.push(() => api.close());
      const sessions = async (count: number): Promise<number[]> => {
        const latencies: number[] = [];
        let next = 0;
        const worker = async () => {
          while (next < count) {
            const goal = QUESTIONS[next++ % QUESTIONS.length]!;
            const started = performance.now();
            const { session } = await api.startSession({ goal, task: {}, scopes: ["kb:read"], policy: "scripted" });
            const end = await endOf(session!.sessionId);
            if (end.state !== "DONE") throw new Error(`a bench question session ended ${end.state}`);
            latencies.push(performance.now() - started);
          }
        };
        await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
        return latencies.sort((a, b) => a - b);
      };
      await sessions(WARM_UP_SESSIONS);
      return {
        async run(label: string): Promise<Run> {
          const before = await kbCounters(proc);
          const latencies = await sessions(SESSIONS);
          const after = await kbCounters(proc);
          return {
            label,
            p50Ms: percentile(latencies, 0.5),
            p95Ms: percentile(latencies, 0.95),
            calls: after.calls - before.calls,
            hedges: after.hedges - before.hedges,
            hedgesWon: after.hedgesWon - before.hedgesWon,
          };
        },
      };
    };
    const hedging = await orchestrator("hedging", true);
    const plain = await orchestrator("plain", false);

    const healthy = await hedging.run("(a) healthy, hedging on");
    const slowMs = Math.round(BASE_MS + 9 * normalMs);
    await setLatency(0, slowMs);
    const unhedged = await plain.run("(b) 1 of 3 slowed 10x, hedging off");
    const hedged = await hedging.run("(c) 1 of 3 slowed 10x, hedging on");

    console.log(`hedge: question sessions (1 kb-search Search each) through the orchestrator, 3 kb-search replicas as processes, ${SESSIONS} sessions per run, ${IN_FLIGHT} in flight`);
    console.log(`  Search normal latency ${normalMs.toFixed(1)} ms (every replica +${BASE_MS} ms); slowed replica +${slowMs} ms (= ${BASE_MS} + 9 x normal)`);
    for (const r of [healthy, unhedged, hedged]) {
      const load = r.calls > 0 ? (100 * r.hedges) / r.calls : 0;
      console.log(
        `  ${r.label.padEnd(38)} session p50 ${r.p50Ms.toFixed(1).padStart(6)} ms  p95 ${r.p95Ms.toFixed(1).padStart(6)} ms  kb calls ${String(r.calls).padStart(4)}  hedges ${String(r.hedges).padStart(3)} (won ${r.hedgesWon})  extra load ${load.toFixed(1)} %`,
      );
    }
    console.log(
      `  p95 (c)/(a) ${(hedged.p95Ms / healthy.p95Ms).toFixed(2)} (target <= 1.5); (b)/(a) ${(unhedged.p95Ms / healthy.p95Ms).toFixed(2)}; extra load of (c) ${((100 * hedged.hedges) / Math.max(1, hedged.calls)).toFixed(1)} % (target <= 10 %)\n`,
    );
  } finally {
    for (const close of closers) close();
    await stopAll(procs, dataDir);
  }
}
