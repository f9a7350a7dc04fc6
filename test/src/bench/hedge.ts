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
import type { ServiceProcess } from "@loopguard/test-kit";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { metricValue, spawnTool } from "@loopguard/tool-sdk/testing";
import { benchPeople } from "./people.js";
import { entryOf, sessionEnds, stopAll } from "./processes.js";

const SESSIONS = 300;
const ROUNDS = 3;
const IN_FLIGHT = 16;
const WARM_UP_SESSIONS = 60;
const BASE_MS = 50;
const QUESTIONS = [
  "how do refunds work",
  "which refunds need an approval",
  "how long do card refunds take",
  "what cannot be returned",
  "what is the risk policy",
];

interface Run {
  readonly label: string;
  readonly latencies: number[];
  calls: number;
  hedges: number;
  hedgesWon: number;
  /** Searches each replica answered (OK), as its own /metrics counts them. */
  readonly answered: number[];
}

const percentile = (sorted: readonly number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;

async function kbCounters(orchestrator: ServiceProcess): Promise<{ calls: number; hedges: number; hedgesWon: number }> {
  const page = await (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
  const labels = { tool: "kb-search", method: "Search" };
  return {
    calls: metricValue(page, "loopguard_tool_client_calls_total", labels),
    hedges: metricValue(page, "loopguard_tool_client_hedges_total", labels),
    hedgesWon: metricValue(page, "loopguard_tool_client_hedges_won_total", labels),
  };
}

async function searchesAnswered(kb: ServiceProcess): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${kb.metricsPort}/metrics`)).text();
  return metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" });
}

export async function benchHedge(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-hedge-"));
  const procs: ServiceProcess[] = [];
  const people = benchPeople();
  const closers: (() => void)[] = [];
  try {
    const replicas: ServiceProcess[] = [];
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
      const api = createRawClient(OrchestratorService, proc.address, {
        token: await people.token("requester", ["sessions:read", "sessions:write", "grant:kb:read"], "orchestrator"),
      });
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
      return { proc, sessions };
    };
    const hedging = await orchestrator("hedging", true);
    const plain = await orchestrator("plain", false);
    const slowMs = Math.round(BASE_MS + 9 * normalMs);

    // Rounds alternate the three runs, so the machine's noise lands on all alike.
    const runs: Run[] = [
      { label: "(a) healthy, hedging on", latencies: [], calls: 0, hedges: 0, hedgesWon: 0, answered: [0, 0, 0] },
      {
        label: "(b) 1 of 3 slowed 10x, hedging off",
        latencies: [],
        calls: 0,
        hedges: 0,
        hedgesWon: 0,
        answered: [0, 0, 0],
      },
      {
        label: "(c) 1 of 3 slowed 10x, hedging on",
        latencies: [],
        calls: 0,
        hedges: 0,
        hedgesWon: 0,
        answered: [0, 0, 0],
      },
    ];
    const setup = [
      { orchestrator: hedging, slow: false },
      { orchestrator: plain, slow: true },
      { orchestrator: hedging, slow: true },
    ];
    for (let round = 0; round < ROUNDS; round++) {
      for (const [index, { orchestrator: o, slow }] of setup.entries()) {
        const run = runs[index]!;
        await setLatency(0, slow ? slowMs : BASE_MS);
        const before = await kbCounters(o.proc);
        const answeredBefore = await Promise.all(replicas.map(searchesAnswered));
        run.latencies.push(...(await o.sessions(SESSIONS / ROUNDS)));
        const after = await kbCounters(o.proc);
        const answeredAfter = await Promise.all(replicas.map(searchesAnswered));
        run.calls += after.calls - before.calls;
        run.hedges += after.hedges - before.hedges;
        run.hedgesWon += after.hedgesWon - before.hedgesWon;
        for (let r = 0; r < 3; r++) run.answered[r]! += answeredAfter[r]! - answeredBefore[r]!;
      }
    }

    console.log(
      `hedge: question sessions (1 kb-search Search each) through the orchestrator, 3 kb-search replicas as processes, ${SESSIONS} sessions per run in ${ROUNDS} alternated rounds, ${IN_FLIGHT} in flight`,
    );
    console.log(
      `  Search normal latency ${normalMs.toFixed(1)} ms (every replica +${BASE_MS} ms); slowed replica +${slowMs} ms (= ${BASE_MS} + 9 x normal)`,
    );
    for (const r of runs) r.latencies.sort((a, b) => a - b);
    const p95 = (r: Run) => percentile(r.latencies, 0.95);
    for (const r of runs) {
      const load = r.calls > 0 ? (100 * r.hedges) / r.calls : 0;
      console.log(
        `  ${r.label.padEnd(36)} session p50 ${percentile(r.latencies, 0.5).toFixed(0).padStart(5)} ms  p95 ${p95(r).toFixed(0).padStart(5)} ms  kb calls ${r.calls}  hedges ${r.hedges} (won ${r.hedgesWon})  extra load ${load.toFixed(1)} %  Searches answered by replica 0 (slowed)/1/2: ${r.answered.join("/")}`,
      );
    }
    const [healthy, unhedged, hedged] = runs as [Run, Run, Run];
    console.log(
      `  p95 (c)/(a) ${(p95(hedged) / p95(healthy)).toFixed(2)} (target <= 1.5); (b)/(a) ${(p95(unhedged) / p95(healthy)).toFixed(2)}; extra load of (c) ${((100 * hedged.hedges) / Math.max(1, hedged.calls)).toFixed(1)} % (target <= 10 %)\n`,
    );
  } finally {
    for (const close of closers) close();
    await stopAll(procs, dataDir);
  }
}
