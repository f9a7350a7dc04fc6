// Acceptance: 1,000 WatchSession streams open at once against a real orchestrator process (held
// by a process of their own, spread over four callers), while GetSession and ResolveApproval are
// timed from here against their contract's p95_target_ms, and the orchestrator's resident memory
// is read from its /metrics before, during and after. Prints the figures it measured.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { kill, repoRoot, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, methodPolicy, type RawClient } from "@loopguard/tool-sdk";
import {
  metricValue,
  SESSION_OPERATOR_SCOPES,
  spawnTool,
  startAllTools,
  testOrchestratorEnv,
  testToken,
  toolAddressEnv,
  workspaceService,
} from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const WATCHER_ENTRY = join(repoRoot, "test", "dist", "load", "watch-streams.js");
const STREAMS = 1000;
const WATCHERS = 4;
const WAITING_SESSIONS = 100;
/** Sessions left waiting (never approved): their streams are still open when the client goes away. */
const HELD_SESSIONS = 20;
const GET_CALLS = 1000;
const SETTLE_MS = 3000;
const IDLE_MS = 5000;
const HIGH_RISK = { id_card: "110101199810246781", phone: "+8617712345678" };

type Api = RawClient<typeof OrchestratorService>;

const data = tempDir("e2e");
const processes: ServiceProcess[] = [];
let orchestrator: ServiceProcess;
let api: Api;
let approver: Api;

beforeAll(async () => {
  const tools = await startAllTools(data.dir);
  processes.push(...Object.values(tools));
  orchestrator = await spawnTool(workspaceService("orchestrator").entry, {
    ...testOrchestratorEnv(),
    LOOPGUARD_DATA_DIR: join(data.dir, "orchestrator"),
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    ...toolAddressEnv(tools),
    APPROVAL_TTL_MS: "600000",
    // One caller starts every session and they all stay in flight (waiting for an approval).
    ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(WAITING_SESSIONS + HELD_SESSIONS),
  });
  processes.push(orchestrator);
  api = createRawClient(OrchestratorService, orchestrator.address, {
    token: await testToken({ subject: "load-operator", scopes: SESSION_OPERATOR_SCOPES }),
  });
  approver = createRawClient(OrchestratorService, orchestrator.address, {
    token: await testToken({ subject: "load-approver", scopes: ["sessions:read", "approvals:write"] }),
  });
}, 60_000);

afterAll(async () => {
  api?.close();
  approver?.close();
  await Promise.all(processes.map((p) => kill(p)));
  data.remove();
});

async function metrics(): Promise<string> {
  return (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
}

const mib = (bytes: number) => Math.round(bytes / 1024 / 1024);

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Times `call` `n` times, one at a time; milliseconds, sorted. */
async function timed(n: number, call: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 1) {
    const started = performance.now();
    await call(i);
    out.push(performance.now() - started);
  }
  return out.sort((a, b) => a - b);
}

const summary = (ms: readonly number[]) =>
  `p50 ${percentile(ms, 50).toFixed(1)} ms, p95 ${percentile(ms, 95).toFixed(1)} ms, p99 ${percentile(ms, 99).toFixed(1)} ms, max ${ms.at(-1)!.toFixed(1)} ms (${ms.length} calls)`;

/** Starts the stream holder and resolves once every stream has had its first message. */
async function holdStreams(ids: readonly string[]): Promise<{ close: () => Promise<Record<string, unknown>> }> {
  // Operators' consoles: they follow every caller's sessions, through and after the approval.
  const tokens = await Promise.all(
    Array.from({ length: WATCHERS }, (_, i) =>
      testToken({ subject: `load-watcher-${i}`, scopes: ["sessions:read", "sessions:admin"] }),
    ),
  );
  const child = spawn(process.execPath, [WATCHER_ENTRY], {
    env: {
      ...process.env,
      TARGET: orchestrator.address,
      TOKENS: JSON.stringify(tokens),
      SESSION_IDS: ids.join(","),
      STREAMS: String(STREAMS),
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => JSON.parse(String((await lines.next()).value)) as Record<string, unknown>;
  const first: Record<string, unknown> = await Promise.race([
    next(),
    sleep(60_000, { failed: "no answer within 60 s" }, { ref: false }),
  ]);
  if (first.opened !== STREAMS) {
    child.kill("SIGKILL");
    throw new Error(`the streams did not all open: ${JSON.stringify(first)}`);
  }
  return {
    async close() {
      child.kill("SIGTERM");
      const last = await next();
      await once(child, "exit");
      return last;
    },
  };
}

describe("1,000 WatchSession streams against a real orchestrator process", () => {
  it("leave GetSession and ResolveApproval within their contract's p95 targets, and the orchestrator's memory bounded", async () => {
    const getTarget = methodPolicy(OrchestratorService.method.getSession).sla!.p95TargetMs;
    const approveTarget = methodPolicy(OrchestratorService.method.resolveApproval).sla!.p95TargetMs;

    const ids: string[] = [];
    for (let i = 0; i < WAITING_SESSIONS + HELD_SESSIONS; i += 1) {
      const { session } = await api.startSession({
        goal: "Refund 1.00 of ord_DEMO00000008",
        task: {
          kind: "refund",
          order_id: "ord_DEMO00000008",
          amount_cents: 100,
          reason: "DAMAGED",
          ...HIGH_RISK,
        } as never,
        scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
      });
      ids.push(session!.sessionId);
    }
    for (let i = 0; i < 600; i += 1) {
      const { sessions } = await api.listSessions({ state: SessionState.AWAITING_APPROVAL, pageSize: 500 });
      if (sessions.length === WAITING_SESSIONS + HELD_SESSIONS) break;
      await sleep(100);
    }
    const shown = new Map<string, { approvalId: string; argumentsHash: string }>();
    for (const s of (await api.listSessions({ state: SessionState.AWAITING_APPROVAL, pageSize: 500 })).sessions)
      shown.set(s.sessionId, s.pendingApproval!);
    expect(shown.size).toBe(WAITING_SESSIONS + HELD_SESSIONS);
    // Warm both paths, so that compiling them is not what is measured.
    await timed(50, (i) => api.getSession({ sessionId: ids[i % ids.length]! }));
    const before = metricValue(await metrics(), "process_resident_memory_bytes");
    const idleCpu = async () => {
      const from = metricValue(await metrics(), "process_cpu_seconds_total");
      await sleep(IDLE_MS);
      return ((metricValue(await metrics(), "process_cpu_seconds_total") - from) * 1000) / (IDLE_MS / 1000);
    };
    const idleAlone = await idleCpu();

    const streams = await holdStreams(ids);
    const open = await metrics();
    expect(metricValue(open, "loopguard_tool_open_streams")).toBe(STREAMS);
    const opened = metricValue(open, "process_resident_memory_bytes");
    // What the open streams cost while nothing happens: waiting on events, nothing but a slow
    // backstop read each. (Each stream's catch-up, its session's history so far, is sent first.)
    await sleep(SETTLE_MS);
    const idleWatched = await idleCpu();

    const gets = await timed(GET_CALLS, (i) => api.getSession({ sessionId: ids[(i * 7) % ids.length]! }));
    const approvals = await timed(WAITING_SESSIONS, (i) => {
      const id = ids[i]!;
      const { approvalId, argumentsHash } = shown.get(id)!;
      return approver.resolveApproval({ sessionId: id, approvalId, argumentsHash, approve: true, reason: "load test" });
    });
    const during = metricValue(await metrics(), "process_resident_memory_bytes");
    const held = await streams.close();
    for (let i = 0; i < 100 && metricValue(await metrics(), "loopguard_tool_open_streams") > 0; i += 1)
      await sleep(100);
    const closed = await metrics();
    const after = metricValue(closed, "process_resident_memory_bytes");

    console.log(
      [
        `WatchSession load: ${STREAMS} streams over ${WAITING_SESSIONS + HELD_SESSIONS} sessions from ${WATCHERS} callers; the stream holder saw ${JSON.stringify(held)}`,
        `  GetSession      ${summary(gets)}; contract p95 target ${getTarget} ms`,
        `  ResolveApproval ${summary(approvals)}; contract p95 target ${approveTarget} ms`,
        `  orchestrator CPU while nothing moves: ${idleAlone.toFixed(1)} ms per second without streams, ${idleWatched.toFixed(1)} ms per second with the ${STREAMS} streams open`,
        `  orchestrator RSS: ${mib(before)} MiB before, ${mib(opened)} MiB with the streams open, ${mib(during)} MiB after the calls, ${mib(after)} MiB once they closed`,
      ].join("\n"),
    );
    // The approved sessions ended and so did their streams; the held ones' were still open when
    // their client went away at once. The orchestrator let go of them all and runs on.
    expect(held.closed).toBeGreaterThan(0);
    expect(orchestrator.child.exitCode).toBeNull();
    expect(metricValue(closed, "loopguard_tool_open_streams")).toBe(0);
    expect(metricValue(closed, "loopguard_tool_streams_refused_total")).toBe(0);
    expect(
      metricValue(closed, "grpc_server_handled_total", { grpc_method: "GetSession", grpc_code: "OK" }),
    ).toBeGreaterThanOrEqual(GET_CALLS);
    expect(percentile(gets, 95)).toBeLessThanOrEqual(getTarget);
    expect(percentile(approvals, 95)).toBeLessThanOrEqual(approveTarget);
    // Bounded: a thousand idle streams cost tens of MiB, not a copy of each session per poll.
    expect(during - before).toBeLessThan(128 * 1024 * 1024);
    expect(after - before).toBeLessThan(128 * 1024 * 1024);
  }, 300_000);
});
