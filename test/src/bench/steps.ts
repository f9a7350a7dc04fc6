// `pnpm bench steps`: what the orchestrator costs per tool step, and what one state transition
// costs on each store.
//   (a) kb-search and the orchestrator as real processes, 64 sessions kept in flight; tool steps
//       completed per second against a bare grpc-js client calling the same kb-search process
//       with 64 in flight. Two session shapes with the scripted "question" task: one search then
//       the answer (every session cost lands on its one step), and a goal with three subgoals
//       (four searches, then the answer). A fourth load, bare Health/Check calls, prices a gRPC
//       hop that does no work. The loads alternate in rounds in one run; the CPU each process
//       spent is read from its /metrics, the bench's own (the client) from process.cpuUsage(), and
//       "cores busy" says whether the two cores or one process's thread was the limit. The same
//       two session shapes through the floor host (floor-host.ts: grpc-js, the kb-search calls
//       and, in one variant, a SQLite write per step, nothing else) show what part of the
//       gap to bare no agent host on this stack and machine can close.
//   (b) transition p50/p99 (optimistic-lock UPDATE + audit row) on SQLite and on PostgreSQL.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import { PostgresSessionStore, SqliteSessionStore, type SessionStore } from "@loopguard/orchestrator";
import { Health } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import { compare, loadAverage, type ProbedFigures as Probed } from "./measure.js";
import { benchPeople } from "./people.js";
import { cpuSeconds, entryOf, sessionEnds, stopAll } from "./processes.js";
import { benchTransitions, type TransitionBenchResult } from "./transitions.js";
import { postgresUnavailable, startPostgres } from "@loopguard/sql-store/testing";

const KB_ENTRY = entryOf("kb-search");
const ORCHESTRATOR_ENTRY = entryOf("orchestrator");
const FLOOR_ENTRY = join(dirname(fileURLToPath(import.meta.url)), "floor-host.js");
const IN_FLIGHT = 64;
const GOAL = "how do refunds work";
/** What the scripted policy sends for a question: the goal as the query, three hits. */
const SEARCH = { query: GOAL, limit: 3 };
const SUBGOALS = ["which refunds need an approval", "how long do card refunds take", "what cannot be returned"];

async function benchToolSteps(durationMs: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-steps-"));
  const procs: ServiceProcess[] = [];
  try {
    // Allow more than IN_FLIGHT at once, so load shedding does not cap either side.
    const people = benchPeople();
    const kb = await spawnTool(KB_ENTRY, {
      ...people.env,
      KB_SEARCH_PORT: "0",
      KB_SEARCH_METRICS_PORT: "0",
      KB_SEARCH_MAX_CONCURRENT: "512",
      LOOPGUARD_DATA_DIR: join(dataDir, "kb"),
    });
    procs.push(kb);
    const orchestrator = await spawnTool(ORCHESTRATOR_ENTRY, {
      ...people.orchestratorEnv,
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      ORCHESTRATOR_STORE: `sqlite:${join(dataDir, "orchestrator.db")}`,
      LOOPGUARD_DATA_DIR: join(dataDir, "orchestrator"),
      KB_SEARCH_ADDR: kb.address,
      // Question sessions call kb-search only; these addresses are never dialled.
      BILLING_ADDR: "127.0.0.1:9",
      RISK_ADDR: "127.0.0.1:9",
      // Completion is read from the "session ended" info line.
      LOG_LEVEL: "info",
      // Each call in flight is one session of the one bench caller, ended (and counted out) before the next starts.
      ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(IN_FLIGHT),
    });
    procs.push(orchestrator);
    const kbToken = await people.token("operator", ["kb:read"]);
    const floor = await spawnTool(FLOOR_ENTRY, {
      KB_SEARCH_ADDR: kb.address,
      FLOOR_KB_TOKEN: kbToken,
      FLOOR_DATA_DIR: dataDir,
    });
    procs.push(floor);
    const endOf = sessionEnds(orchestrator, floor);

    const apiToken = await people.token(
      "requester",
      ["sessions:read", "sessions:write", "grant:kb:read"],
      "orchestrator",
    );
    const kbClient = createRawClient(KbSearchService, kb.address, { token: kbToken });
    const health = createRawClient(Health, kb.address);
    const api = createRawClient(OrchestratorService, orchestrator.address, { token: apiToken });
    const floorApi = createRawClient(OrchestratorService, floor.address, { token: apiToken });
    try {
      const ended = new Map<string, number>();
      const session =
        (subgoals: readonly string[], policy = "scripted") =>
        async () => {
          const { session: s } = await (policy === "scripted" ? api : floorApi).startSession({
            goal: GOAL,
            task: subgoals.length > 0 ? { kind: "question", subgoals: [...subgoals] } : {},
            scopes: ["kb:read"],
            policy,
          });
          const end = await endOf(s!.sessionId);
          ended.set(end.state, (ended.get(end.state) ?? 0) + 1);
          // Each search is a decision, and so is the answer.
          if (end.state !== "DONE" || end.decisions !== subgoals.length + 2)
            throw new Error(`a bench session ended ${end.state} after ${end.decisions} decisions`);
        };
      const loadBefore = loadAverage();
      const [bare, hop, oneStep, fourSteps, ...floors] = (await compare(
        IN_FLIGHT,
        3 * durationMs,
        [
          { label: "bare grpc-js client -> kb-search Search", call: () => kbClient.search(SEARCH) },
          { label: "bare grpc-js client -> kb-search Health", call: () => health.check({ service: "" }) },
          { label: "orchestrator, 1 kb step per session", call: session([]) },
          { label: "orchestrator, 4 kb steps per session", call: session(SUBGOALS) },
          { label: "floor host: grpc-js only, 1 kb step", call: session([], "floor-none") },
          { label: "floor host: grpc-js only, 4 kb steps", call: session(SUBGOALS, "floor-none") },
          { label: "floor host + SQLite, 1 kb step", call: session([], "floor-sqlite") },
          { label: "floor host + SQLite, 4 kb steps", call: session(SUBGOALS, "floor-sqlite") },
        ],
        {
          rounds: 3,
          warmUpMs: 3000,
          probe: async () => [
            await cpuSeconds(orchestrator),
            await cpuSeconds(kb),
            ownCpuSeconds(),
            await cpuSeconds(floor),
          ],
        },
      )) as [Probed, Probed, Probed, Probed, ...Probed[]];
      console.log(
        `steps: tool steps through the orchestrator vs bare calls to the same kb-search process (both as processes, loopback, rounds alternated); load average ${loadBefore} before, ${loadAverage()} after`,
      );
      const row = (f: Probed, stepsPerCall: number, unit: string, host = 0) => {
        const steps = f.calls * stepsPerCall;
        const cpu = (k: number) => (((f.probed[k] ?? 0) * 1000) / steps).toFixed(2);
        return `  ${f.label.padEnd(40)} ${String(f.concurrency).padStart(3)} in flight  ${(f.perSecond * stepsPerCall).toFixed(0).padStart(6)} ${unit}  ratio ${((f.perSecond * stepsPerCall) / bare.perSecond).toFixed(2)}  CPU per step: ${host === 0 ? "orchestrator" : "floor host"} ${cpu(host)} ms, kb-search ${cpu(1)} ms, client ${cpu(2)} ms; cores busy ${coresBusy(f).toFixed(2)}`;
      };
      console.log(row(bare, 1, "calls/s"));
      console.log(row(hop, 1, "calls/s"));
      console.log(row(oneStep, 1, "steps/s"));
      console.log(row(fourSteps, 4, "steps/s"));
      for (const [i, f] of floors.entries()) console.log(row(f, i % 2 === 0 ? 1 : 4, "steps/s", 3));
      console.log(`  sessions ended: ${JSON.stringify(Object.fromEntries(ended))}; target ratio >= 0.75\n`);
    } finally {
      kbClient.close();
      health.close();
      api.close();
      floorApi.close();
    }
  } finally {
    await stopAll(procs, dataDir);
  }
}

function ownCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

/** CPU seconds all three processes spent per second of the load: how many of the machine's cores it kept busy. */
function coresBusy(f: Probed): number {
  return (f.probed.reduce((a, b) => a + b, 0) / f.calls) * f.perSecond;
}

function transitionRow(label: string, r: TransitionBenchResult): string {
  return `  ${label.padEnd(44)} n=${String(r.n).padStart(5)}  p50 ${(r.p50Us / 1000).toFixed(3)} ms  p99 ${(r.p99Us / 1000).toFixed(3)} ms  ${String(r.perSecond).padStart(6)} transitions/s`;
}

/**
 * Steady-state latency: the first transitions of a process run slower while V8 compiles the path
 * (p99 several times higher), so transitions are issued for at least WARM_UP_MS (and at most
 * 20,000) before the measured run.
 */
const WARM_UP_MS = 2000;

async function timed(store: SessionStore, n: number): Promise<TransitionBenchResult> {
  try {
    const started = performance.now();
    for (let warmed = 0; warmed < 20_000 && performance.now() - started < WARM_UP_MS; warmed += 500)
      await benchTransitions(store, 500);
    return await benchTransitions(store, n);
  } finally {
    await store.close();
  }
}

async function benchTransitionLatency(): Promise<void> {
  console.log("steps: one session transition (optimistic-lock UPDATE + audit row), back to back on one session");
  const dir = mkdtempSync(join(tmpdir(), "loopguard-bench-transitions-"));
  try {
    console.log(
      transitionRow(
        "SQLite (WAL, synchronous=NORMAL)",
        await timed(await SqliteSessionStore.open(join(dir, "sessions.db")), 10_000),
      ),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const unavailable = postgresUnavailable();
  if (unavailable) {
    console.log(`  PostgreSQL: skipped (${unavailable})\n`);
    return;
  }
  // Default durability (fsync on): the figure is meant to be what a deployment would see.
  const server = await startPostgres({ fsync: true });
  try {
    console.log(
      transitionRow(
        "PostgreSQL 15 (TCP loopback, fsync on)",
        await timed(await PostgresSessionStore.open(await server.createDatabase("bench")), 2000),
      ),
    );
  } finally {
    await server.stop();
  }
  console.log("");
}

export async function benchSteps(durationMs: number): Promise<void> {
  await benchToolSteps(durationMs);
  await benchTransitionLatency();
}
