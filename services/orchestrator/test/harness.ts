// Test harness: every tool service (from the manifests) as real processes, and an orchestrator built in-process (real
// gRPC API through serveTool, real SQLite store, real tool clients) with the config a test needs.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  CallError,
  createLogger,
  createRawClient,
  type RawClient,
  serveTool,
  type ToolServer,
} from "@loopguard/tool-sdk";
import { type ToolProcess, testToken, testOrchestratorEnv, SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import type { Registry } from "prom-client";
import { expect } from "vitest";
import { kill, startAllTools, startTool, TOOLS, toolAddressEnv } from "../../../test/e2e/processes.js";
import { createHttpPort } from "../src/api/http-port.js";
import { loadOrchestratorConfig } from "../src/config.js";
import { LogTail } from "../src/api/log-tail.js";
import type { Orchestrator } from "../src/session/orchestrator.js";
import { type BuildOptions, build } from "../src/server.js";

export interface Tools {
  /** Every tool service of the workspace, by name. */
  readonly all: Readonly<Record<string, ToolProcess>>;
  readonly kb: ToolProcess;
  readonly billing: ToolProcess;
  readonly risk: ToolProcess;
  readonly dataDir: string;
  stop(): Promise<void>;
}

async function startToolsInTurn(dataDir: string): Promise<Record<string, ToolProcess>> {
  const all: Record<string, ToolProcess> = {};
  for (const spec of TOOLS) all[spec.name] = await startTool(spec.name, dataDir);
  return all;
}

/** `inTurn`: one after another, for a busy machine where three starting at once can each miss their start-up timeout. */
export async function startTools({ inTurn = false }: { readonly inTurn?: boolean } = {}): Promise<Tools> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-orch-tools-"));
  const all = inTurn ? await startToolsInTurn(dataDir) : await startAllTools(dataDir);
  return toolsOf(all, dataDir);
}

/** Running tool processes on one data folder as Tools; stop() kills them and removes the folder. */
export function toolsOf(all: Readonly<Record<string, ToolProcess>>, dataDir: string): Tools {
  return {
    all,
    kb: all["kb-search"]!,
    billing: all.billing!,
    risk: all.risk!,
    dataDir,
    async stop() {
      await Promise.all(Object.values(all).map((p) => kill(p)));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface TestOrchestrator {
  /** An operator (subject "test") who starts sessions and may grant them every tool scope. */
  readonly api: RawClient<typeof OrchestratorService>;
  /** A second person (subject "test-approver"): approvals need someone other than the session's creator. */
  readonly approver: RawClient<typeof OrchestratorService>;
  readonly orchestrator: Orchestrator;
  readonly server: ToolServer;
  readonly dataDir: string;
  readonly logs: string[];
  /** The HTTP port's base URL (dashboard, JSON API, /metrics), e.g. http://127.0.0.1:41234. */
  readonly httpUrl: string;
  readonly logTail: LogTail;
  /** The registry /metrics serves (the orchestrator's own metrics, the tool clients'). */
  readonly registry: Registry;
  close(): Promise<void>;
}

export async function startOrchestrator(
  tools: Tools,
  env: Record<string, string> = {},
  options: Pick<BuildOptions, "policies"> = {},
): Promise<TestOrchestrator> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
  const config = loadOrchestratorConfig({
    ...testOrchestratorEnv(),
    LOOPGUARD_DATA_DIR: dataDir,
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    ...toolAddressEnv(tools.all),
    ...env,
  });
  const logs: string[] = [];
  const logTail = new LogTail();
  const log = createLogger({
    service: "orchestrator",
    level: "debug",
    write: (line) => {
      logs.push(line);
      logTail.write(line);
    },
  });
  const built = await build(config, log, { logTail, ...options });
  const server = await serveTool(built.definition, {
    ...config,
    logger: log,
    metrics: built.metrics,
    connect: true,
    http: createHttpPort({ log }),
  });
  built.orchestrator.start();
  // As main does once serving: the tokenizer's load is not charged to a test's first session.
  built.warmUp();
  const token = await testToken({ subject: "test", scopes: [...SESSION_OPERATOR_SCOPES, "approvals:write"] });
  const api = createRawClient(OrchestratorService, server.address, { token });
  const approver = createRawClient(OrchestratorService, server.address, {
    token: await testToken({ subject: "test-approver", scopes: ["sessions:read", "approvals:write"] }),
  });
  return {
    api,
    approver,
    orchestrator: built.orchestrator,
    server,
    dataDir,
    logs,
    httpUrl: `http://127.0.0.1:${server.metricsPort}`,
    logTail,
    registry: built.metrics.registry,
    async close() {
      api.close();
      approver.close();
      await server.shutdown();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export const ALL_SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];

/** Polls GetSession until `until` holds (default: a terminal state); bounded. */
export async function waitForSession(
  api: RawClient<typeof OrchestratorService>,
  id: string,
  until: (s: Session) => boolean = isEnded,
  timeoutMs = 20_000,
): Promise<Session> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const { session } = await api.getSession({ sessionId: id });
    if (session && until(session)) return session;
    if (Date.now() > end)
      throw new Error(`session ${id} stuck in ${SessionState[session!.state]} (${session?.stopReason})`);
    await sleep(50);
  }
}

/** The CallError a call was refused with (fails the test if it was answered). */
export async function refusal(promise: Promise<unknown>): Promise<CallError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(CallError);
  return error as CallError;
}

export function isEnded(s: Session): boolean {
  return s.state === SessionState.DONE || s.state === SessionState.FAILED || s.state === SessionState.CANCELLED;
}

/** Demo customers of the risk service: score 5, and score 92 (at or above the approval threshold). */
export const LOW_RISK_CUSTOMER = { id_card: "110101198003121232", phone: "+8613800138000" };
export const HIGH_RISK_CUSTOMER = { id_card: "110101199810246781", phone: "+8617712345678" };
/** A refund task for the high-risk customer: it waits for an approval. */
export const HIGH_RISK_REFUND = {
  kind: "refund",
  order_id: "ord_DEMO00000008",
  amount_cents: 1000,
  reason: "DAMAGED",
  ...HIGH_RISK_CUSTOMER,
};

/** Starts a scripted refund session of `amountCents` of `orderId` for `customer`; its id. */
export async function startRefund(
  api: RawClient<typeof OrchestratorService>,
  orderId: string,
  amountCents: number,
  customer: Record<string, string>,
): Promise<string> {
  const { session } = await api.startSession({
    goal: `Refund ${(amountCents / 100).toFixed(2)} of ${orderId}`,
    task: { kind: "refund", order_id: orderId, amount_cents: amountCents, reason: "DAMAGED", ...customer } as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
  });
  return session!.sessionId;
}
