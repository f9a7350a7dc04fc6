// `pnpm bench pg`: the orchestrator on PostgreSQL, as real processes (PostgreSQL 15 with fsync on,
// kb-search, one or two orchestrator replicas sharing one database), running the one-step and
// four-step question sessions of `pnpm bench steps` at 64 in flight, for each replica count and
// pool size per replica. Everything but the load is read from the orchestrators' /metrics: steps
// and transitions per second, round trips per step by statement, the pools' mean connections in
// use and mean wait per checkout. Every process shares the machine's cores, so on a small machine
// a second replica measures contention for the CPU, not how replicas scale.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceProcess } from "@loopguard/test-kit";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, parseMetrics, type Sample, samplesOf, sumOf } from "@loopguard/tool-sdk";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import { postgresUnavailable, type PostgresServer, startPostgres } from "@loopguard/sql-store/testing";
import { compare, type ProbedFigures } from "./measure.js";
import { benchPeople } from "./people.js";
import { entryOf, sessionEnds, stopAll } from "./processes.js";

const IN_FLIGHT = 64;
const REPLICAS = [1, 2] as const;
const POOL_SIZES = [2, 5, 10] as const;
const GOAL = "how do refunds work";
const SUBGOALS = ["which refunds need an approval", "how long do card refunds take", "what cannot be returned"];
const SHAPES = [
  { label: "1 kb step per session", subgoals: [] as readonly string[] },
  { label: "4 kb steps per session", subgoals: SUBGOALS },
] as const;

/** The probe's fixed figures, summed over replicas, before the statements by name. */
const FIXED = {
  wall: "",
  cpu: "process_cpu_seconds_total",
  transitions: "loopguard_session_transitions_total",
  steps: "loopguard_session_tool_results_total",
  roundTrips: "loopguard_store_round_trips_total",
  busy: "loopguard_store_pool_busy_seconds_total",
  waitSum: "loopguard_store_pool_wait_seconds_sum",
  waitCount: "loopguard_store_pool_wait_seconds_count",
} as const;
type Fixed = Record<keyof typeof FIXED, number>;

/**
 * One probe over every replica's /metrics: the wall clock and FIXED, then statements by name in
 * the order they were first seen (append-only, so compare's deltas line up).
 */
function metricsProbe(replicas: readonly ServiceProcess[]) {
  const statements: string[] = [];
  const probe = async (): Promise<number[]> => {
    const pages = await Promise.all(
      replicas.map(async (r) => parseMetrics(await (await fetch(`http://127.0.0.1:${r.metricsPort}/metrics`)).text())),
    );
    const total = (name: string): number => pages.reduce((sum, page) => sum + sumOf(samplesOf(page, name)), 0);
    const byStatement = new Map<string, number>();
    for (const s of pages.flatMap((page): Sample[] => samplesOf(page, "loopguard_store_statements_total"))) {
      const name = s.labels.statement ?? "";
      if (!statements.includes(name)) statements.push(name);
      byStatement.set(name, (byStatement.get(name) ?? 0) + s.value);
    }
    return [
      ...Object.values(FIXED).map((name) => (name === "" ? performance.now() / 1000 : total(name))),
      ...statements.map((name) => byStatement.get(name) ?? 0),
    ];
  };
  return { probe, statements };
}

interface Config {
  readonly replicas: number;
  readonly pool: number;
}

/** Rates are over the rounds' wall time, ramp and drain included: counted by the processes, not by sessions ended. */
function report(config: Config, f: ProbedFigures, statements: readonly string[]): string[] {
  const m = Object.fromEntries(Object.keys(FIXED).map((k, i) => [k, f.probed[i] ?? 0])) as Fixed;
  const byName = f.probed.slice(Object.keys(FIXED).length);
  const statementsTotal = byName.reduce((a, b) => a + b, 0);
  const perSession = statements
    .map((name, i) => [name, (byName[i] ?? 0) / f.calls] as const)
    .filter(([, n]) => n >= 0.05)
    .sort((a, b) => b[1] - a[1])
    .map(([name, n]) => `${name} ${n.toFixed(1)}`);
  const meanWaitMs = m.waitCount > 0 ? (m.waitSum / m.waitCount) * 1000 : 0;
  return [
    `  ${f.label.padEnd(24)} ${(m.steps / m.wall).toFixed(0).padStart(5)} steps/s  ${(m.transitions / m.wall).toFixed(0).padStart(5)} transitions/s  ` +
      `${(m.roundTrips / m.steps).toFixed(1)} round trips per step (${(m.roundTrips / m.transitions).toFixed(2)} per transition, ` +
      `${(statementsTotal / m.steps).toFixed(1)} statements)  session p50 ${f.p50Ms.toFixed(0)} ms p99 ${f.p99Ms.toFixed(0)} ms`,
    `    pool: ${(m.busy / m.wall / config.replicas).toFixed(1)} of ${config.pool} in use per replica on average, ` +
      `wait ${meanWaitMs.toFixed(2)} ms per checkout (${(m.waitSum / m.wall).toFixed(1)} waiting on average)  ` +
      `orchestrator CPU ${((m.cpu * 1000) / m.steps).toFixed(2)} ms per step`,
    `    statements per session: ${perSession.join(", ")}`,
  ];
}

async function measureConfig(
  server: PostgresServer,
  kbAddress: string,
  config: Config,
  durationMs: number,
): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-pg-"));
  const people = benchPeople();
  const storeUrl = await server.createDatabase(`bench_r${config.replicas}_p${config.pool}`);
  const replicas: ServiceProcess[] = [];
  try {
    // One after another: the first migrates the fresh database, the next finds it current.
    for (let i = 0; i < config.replicas; i += 1) {
      replicas.push(
        await spawnTool(entryOf("orchestrator"), {
          ...people.orchestratorEnv,
          ORCHESTRATOR_PORT: "0",
          ORCHESTRATOR_HTTP_PORT: "0",
          ORCHESTRATOR_STORE: storeUrl,
          ORCHESTRATOR_STORE_POOL_SIZE: String(config.pool),
          ORCHESTRATOR_INSTANCE_ID: `bench-${i}`,
          LOOPGUARD_DATA_DIR: join(dataDir, `orchestrator-${i}`),
          KB_SEARCH_ADDR: kbAddress,
          BILLING_ADDR: "127.0.0.1:9",
          RISK_ADDR: "127.0.0.1:9",
          LOG_LEVEL: "info",
          ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(IN_FLIGHT),
        }),
      );
    }
    const endOf = sessionEnds(...replicas);
    const token = await people.token("requester", ["sessions:read", "sessions:write", "grant:kb:read"], "orchestrator");
    const apis = replicas.map((r) => createRawClient(OrchestratorService, r.address, { token }));
    const ended = new Map<string, number>();
    const count = (state: string) => ended.set(state, (ended.get(state) ?? 0) + 1);
    let next = 0;
    // Starts go to the replicas in turn, as a load balancer would spread them.
    const session = (subgoals: readonly string[]) => async () => {
      const api = apis[next++ % apis.length]!;
      try {
        const { session: s } = await api.startSession({
          goal: GOAL,
          task: subgoals.length > 0 ? { kind: "question", subgoals: [...subgoals] } : {},
          scopes: ["kb:read"],
          policy: "scripted",
        });
        count((await endOf(s!.sessionId)).state);
      } catch (error) {
        // A pool too small, or one caller's starts queued on its quota lock, shows as refused starts (the
        // store's bounded waits): counted by reason, not fatal.
        count(`start refused: ${String((error as { details?: string }).details ?? error).slice(0, 60)}`);
      }
    };
    const { probe, statements } = metricsProbe(replicas);
    try {
      const figures = await compare(
        IN_FLIGHT,
        2 * durationMs,
        SHAPES.map((shape) => ({ label: shape.label, call: session(shape.subgoals) })),
        // One round each: a round ends by draining the sessions in flight, seconds each on a busy machine.
        { rounds: 1, warmUpMs: 1000, warmUpCalls: 0, probe },
      );
      console.log(
        `pg: ${config.replicas} replica${config.replicas > 1 ? "s" : ""}, pool ${config.pool} per replica, ${IN_FLIGHT} sessions in flight`,
      );
      for (const f of figures) console.log(report(config, f, statements).join("\n"));
      console.log(`  sessions ended: ${JSON.stringify(Object.fromEntries(ended))}\n`);
    } finally {
      for (const api of apis) api.close();
    }
  } finally {
    await stopAll(replicas, dataDir);
  }
}

export async function benchPgScale(durationMs: number): Promise<void> {
  const unavailable = postgresUnavailable();
  if (unavailable) {
    console.log(`pg: skipped (${unavailable})\n`);
    return;
  }
  console.log(
    "pg: orchestrator replicas on one PostgreSQL 15 (fsync on), question sessions against one kb-search, all as processes on loopback",
  );
  // Default durability: the figures are meant to be what a deployment would see.
  const server = await startPostgres({ fsync: true });
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-pg-kb-"));
  const procs: ServiceProcess[] = [];
  try {
    const kb = await spawnTool(entryOf("kb-search"), {
      ...benchPeople().env,
      KB_SEARCH_PORT: "0",
      KB_SEARCH_METRICS_PORT: "0",
      KB_SEARCH_MAX_CONCURRENT: "512",
      LOOPGUARD_DATA_DIR: dataDir,
    });
    procs.push(kb);
    for (const replicas of REPLICAS)
      for (const pool of POOL_SIZES) await measureConfig(server, kb.address, { replicas, pool }, durationMs);
  } finally {
    await stopAll(procs, dataDir);
    await server.stop();
  }
}
