// Test harness: every tool service (from the manifests) as real processes, an orchestrator built in-process (real
// gRPC API through serveTool, real SQLite store, real tool clients) with the config a test needs, and useSuite, which
// starts both for a test file and stops them after it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { ServiceProcess } from "@loopguard/test-kit";
import { createLogger, createRawClient, type RawClient, serveTool, type ToolServer } from "@loopguard/tool-sdk";
import {
  SESSION_OPERATOR_SCOPES,
  type StartAllOptions,
  startTools as startWorkspaceTools,
  testOrchestratorEnv,
  testToken,
  toolAddressEnv,
  type WorkspaceTools,
} from "@loopguard/tool-sdk/testing";
import type { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { createHttpPort } from "../src/api/http-port.js";
import { LogTail } from "../src/api/log-tail.js";
import { loadOrchestratorConfig } from "../src/config.js";
import type { Orchestrator } from "../src/session/orchestrator.js";
import { type BuildOptions, build } from "../src/server.js";
import { ALL_SCOPES } from "./tool-fixtures.js";

// The tests import what they act on in the tools from here too, beside the services that hold it.
export {
  ALL_SCOPES,
  decisionOn,
  HIGH_RISK_CUSTOMER,
  HIGH_RISK_REFUND,
  LOW_RISK_CUSTOMER,
  refundElsewhere,
  refundsOf,
  setFaults,
  startRefund,
} from "./tool-fixtures.js";

export interface Tools extends WorkspaceTools {
  readonly kb: ServiceProcess;
  readonly billing: ServiceProcess;
  readonly risk: ServiceProcess;
}

/** Every tool of the workspace as a process on a fresh data folder, with the three the tests name. */
export async function startTools(options: StartAllOptions = {}): Promise<Tools> {
  const tools = await startWorkspaceTools(options);
  return { ...tools, kb: tools.all["kb-search"]!, billing: tools.all.billing!, risk: tools.all.risk! };
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

export function startOrchestrator(
  tools: Tools,
  env: Record<string, string> = {},
  options: Pick<BuildOptions, "policies" | "now"> = {},
): Promise<TestOrchestrator> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
  // close() removes the folder; a start that fails removes it here.
  return serveOrchestrator(tools, env, options, dataDir).catch((error: unknown) => {
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  });
}

async function serveOrchestrator(
  tools: Tools,
  env: Record<string, string>,
  options: Pick<BuildOptions, "policies" | "now">,
  dataDir: string,
): Promise<TestOrchestrator> {
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
      try {
        await server.shutdown();
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
      }
    },
  };
}

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

/**
 * Starts a session the openai policy drives on `task` (none: the goal alone) with every scope, and waits for it until
 * `until`.
 */
export async function modelSession(
  orch: TestOrchestrator,
  goal: string,
  task?: object,
  until: (s: Session) => boolean = isEnded,
): Promise<Session> {
  const { session } = await orch.api.startSession({ goal, task: task as never, scopes: ALL_SCOPES, policy: "openai" });
  return waitForSession(orch.api, session!.sessionId, until);
}

export function isEnded(s: Session): boolean {
  return s.state === SessionState.DONE || s.state === SessionState.FAILED || s.state === SessionState.CANCELLED;
}

export interface SuiteOptions {
  /**
   * The file's orchestrator's environment, or a function that makes it once the tools run (e.g. from a fake model
   * server it starts); `false`: the file has none, its tests start their own.
   */
  readonly orchestrator?: Record<string, string> | ((tools: Tools) => Promise<Record<string, string>>) | false;
  readonly policies?: BuildOptions["policies"];
  readonly tools?: StartAllOptions;
}

export interface Suite {
  /** The file's tool processes. */
  readonly tools: Tools;
  /** The file's orchestrator. */
  readonly orch: TestOrchestrator;
  /** Another orchestrator on the file's tools, closed when the test (or, started outside a test, the file) ends. */
  startOrchestrator(env?: Record<string, string>, options?: Pick<BuildOptions, "policies">): Promise<TestOrchestrator>;
  /** Runs `close` when the test ends, or the file when called outside a test; newest first. */
  onCleanUp(close: () => unknown): void;
}

async function closeAll(closes: (() => unknown)[]): Promise<void> {
  for (const close of closes.splice(0).reverse()) await close();
}

/** The tools and (unless told not to) one orchestrator for a test file: started before its tests, stopped after. */
export function useSuite(options: SuiteOptions = {}): Suite {
  let tools: Tools | undefined;
  let orch: TestOrchestrator | undefined;
  let inTest = false;
  const testCleanUps: (() => unknown)[] = [];
  const fileCleanUps: (() => unknown)[] = [];
  beforeAll(async () => {
    tools = await startTools(options.tools);
    const env = typeof options.orchestrator === "function" ? await options.orchestrator(tools) : options.orchestrator;
    if (env !== false)
      orch = await startOrchestrator(tools, env, options.policies ? { policies: options.policies } : {});
  }, 90_000);
  beforeEach(() => {
    inTest = true;
  });
  afterEach(async () => {
    inTest = false;
    await closeAll(testCleanUps);
  });
  afterAll(async () => {
    await orch?.close();
    await closeAll(fileCleanUps);
    await tools?.stop();
  });
  const suite: Suite = {
    get tools() {
      if (!tools) throw new Error("useSuite: the tools start in beforeAll");
      return tools;
    },
    get orch() {
      if (!orch) throw new Error("useSuite: no orchestrator (started in beforeAll unless `orchestrator: false`)");
      return orch;
    },
    async startOrchestrator(env = {}, buildOptions = {}) {
      const started = await startOrchestrator(suite.tools, env, buildOptions);
      suite.onCleanUp(() => started.close());
      return started;
    },
    onCleanUp: (close) => (inTest ? testCleanUps : fileCleanUps).push(close),
  };
  return suite;
}
