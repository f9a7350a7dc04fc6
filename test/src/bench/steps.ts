// `pnpm bench steps`: what the orchestrator costs per tool step, and what one state transition
// costs on each store.
//   (a) kb-search and the orchestrator as real processes; sessions with the scripted "question"
//       task (one kb search, then a final answer: one tool step each), 64 kept in flight for a
//       fixed time, tool steps completed per second — against a bare grpc-js client calling the
//       same kb-search process with 64 in flight, in the same run.
//   (b) transition p50/p99 (optimistic-lock UPDATE + audit row) on SQLite and on PostgreSQL.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { benchTransitions, PostgresSessionStore, SqliteSessionStore, type SessionStore, type TransitionBenchResult } from "@loopguard/orchestrator";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, mintToken } from "@loopguard/tool-sdk";
import { metricValue, spawnTool, TEST_AUTH_SECRET, type ToolProcess } from "@loopguard/tool-sdk/testing";
import { type Figures, measure } from "./measure.js";
import { postgresUnavailable, startPostgres } from "@loopguard/orchestrator/postgres-test-server";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const KB_ENTRY = join(root, "services", "kb-search", "dist", "main.js");
const ORCHESTRATOR_ENTRY = join(root, "services", "orchestrator", "dist", "main.js");
const IN_FLIGHT = 64;
const GOAL = "how do refunds work";
/** What the scripted policy sends for a question: the goal as the query, three hits. */
const SEARCH = { query: GOAL, limit: 3 };
const TOOL_STEPS_PER_SESSION = 1;

/** Resolves, per session id, when the orchestrator logs that the session ended, with its final state. */
function sessionEnds(proc: ToolProcess): (sessionId: string) => Promise<string> {
  const waiting = new Map<string, (state: string) => void>();
  const ended = new Map<string, string>();
  createInterface({ input: proc.child.stdout! }).on("line", (line) => {
    if (!line.includes('"session ended"')) return;
    const record = JSON.parse(line) as { session_id?: string; state?: string };
    const id = String(record.session_id);
    const resolveEnd = waiting.get(id);
    if (resolveEnd) {
      waiting.delete(id);
      resolveEnd(String(record.state));
    } else ended.set(id, String(record.state));
  });
  return (sessionId) => {
    const state = ended.get(sessionId);
    if (state !== undefined) {
      ended.delete(sessionId);
      return Promise.resolve(state);
    }
    return new Promise((resolveEnd) => waiting.set(sessionId, resolveEnd));
  };
}

async function cpuSeconds(proc: ToolProcess): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${proc.metricsPort}/metrics`)).text();
  return metricValue(page, "process_cpu_seconds_total");
}

async function benchToolSteps(durationMs: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-steps-"));
  const procs: ToolProcess[] = [];
  try {
    // Allow more than IN_FLIGHT at once, so load shedding does not cap either side.
    const kb = await spawnTool(KB_ENTRY, { KB_SEARCH_PORT: "0", KB_SEARCH_METRICS_PORT: "0", KB_SEARCH_MAX_CONCURRENT: "512", LOOPGUARD_DATA_DIR: join(dataDir, "kb") });
    procs.push(kb);
    const orchestrator = await spawnTool(ORCHESTRATOR_ENTRY, {
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
    });
    procs.push(orchestrator);
    const endOf = sessionEnds(orchestrator);

    const kbToken = await mintToken(TEST_AUTH_SECRET, { subject: "bench", scopes: ["kb:read"], ttlSeconds: 600 });
    const apiToken = await mintToken(TEST_AUTH_SECRET, { subject: "bench", scopes: ["sessions:read", "sessions:write"], ttlSeconds: 600 });
    const kbClient = createRawClient(KbSearchService, kb.address, { token: kbToken });
    const api = createRawClient(OrchestratorService, orchestrator.address, { token: apiToken });
    try {
      const bare = await measure("bare grpc-js kb Search", IN_FLIGHT, durationMs, () => kbClient.search(SEARCH));

      const states = new Map<string, number>();
      const session = async () => {
        const { session: s } = await api.startSession({ goal: GOAL, task: {}, scopes: ["kb:read"], policy: "scripted" });
        const state = await endOf(s!.sessionId);
        states.set(state, (states.get(state) ?? 0) + 1);
        if (state !== "DONE") throw new Error(`a bench session ended ${state}`);
      };
      const cpuBefore = await cpuSeconds(orchestrator);
      const sessions = await measure("sessions via orchestrator", IN_FLIGHT, durationMs, session);
      const cpuMsPerSession = ((await cpuSeconds(orchestrator)) - cpuBefore) * 1000 / [...states.values()].reduce((a, b) => a + b, 0);
      const stepsPerSecond = sessions.perSecond * TOOL_STEPS_PER_SESSION;

      const row = (label: string, perSecond: number, unit: string, f: Figures) =>
        `  ${label.padEnd(44)} ${String(f.concurrency).padStart(3)} in flight  ${perSecond.toFixed(0).padStart(6)} ${unit}  p50 ${f.p50Ms.toFixed(1)} ms  p99 ${f.p99Ms.toFixed(1)} ms`;
      console.log("steps: tool steps through the orchestrator vs bare calls to the same kb-search process (both as processes, loopback)");
      console.log(row("bare grpc-js client -> kb-search Search", bare.perSecond, "calls/s", bare));
      console.log(row("orchestrator sessions (1 kb step each)", stepsPerSecond, "steps/s", sessions) + "  (latency = whole session)");
      console.log(`  sessions ended: ${JSON.stringify(Object.fromEntries(states))}; orchestrator CPU ${cpuMsPerSession.toFixed(2)} ms per session`);
      console.log(`  ratio ${(stepsPerSecond / bare.perSecond).toFixed(2)} (target >= 0.75)\n`);
    } finally {
      kbClient.close();
      api.close();
    }
  } finally {
    for (const p of procs) p.child.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.exited));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function transitionRow(label: string, r: TransitionBenchResult): string {
  return `  ${label.padEnd(44)} n=${String(r.n).padStart(5)}  p50 ${(r.p50Us / 1000).toFixed(3)} ms  p99 ${(r.p99Us / 1000).toFixed(3)} ms  ${String(r.perSecond).padStart(6)} transitions/s`;
}

async function timed(store: SessionStore, n: number): Promise<TransitionBenchResult> {
  try {
    await benchTransitions(store, Math.min(200, n));
    return await benchTransitions(store, n);
  } finally {
    await store.close();
  }
}

async function benchTransitionLatency(): Promise<void> {
  console.log("steps: one session transition (optimistic-lock UPDATE + audit row), back to back on one session");
  const dir = mkdtempSync(join(tmpdir(), "loopguard-bench-transitions-"));
  try {
    console.log(transitionRow("SQLite (WAL, synchronous=NORMAL)", await timed(new SqliteSessionStore(join(dir, "sessions.db")), 5000)));
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
    console.log(transitionRow("PostgreSQL 15 (TCP loopback, fsync on)", await timed(await PostgresSessionStore.open(await server.createDatabase("bench")), 2000)));
  } finally {
    await server.stop();
  }
  console.log("");
}

export async function benchSteps(durationMs: number): Promise<void> {
  await benchToolSteps(durationMs);
  await benchTransitionLatency();
}
