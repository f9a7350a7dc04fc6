// The workspace's services (from their manifests, services/*/package.json) as real processes on
// loopback: one starter of the tools for the orchestrator's, the gateway's, the e2e and the deploy tests.
import { join } from "node:path";
import { kill, repoRoot, type ServiceProcess, spawnService, tempDir } from "@loopguard/test-kit";
import { discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import { TEST_AUTH_ENV } from "./keys.js";

const SERVICES: readonly ServiceSpec[] = discoverServices(join(repoRoot, "services"));

/** Every tool service of the workspace, read from the manifests. */
export const TOOLS: readonly ServiceSpec[] = SERVICES.filter((s) => s.kind === "tool");

/** A tool service's folder name, which is its contract's tool name, e.g. "kb-search". */
export type ToolName = string;

/** A service of the workspace by its folder name (its entry is the built dist/main.js). */
export function workspaceService(name: string): ServiceSpec {
  const spec = SERVICES.find((s) => s.name === name);
  if (!spec) throw new Error(`no service "${name}" in services/ (${SERVICES.map((s) => s.name).join(", ")})`);
  return spec;
}

/** Settings a tool cannot start without, beyond the common ones spawnTool gives every process. */
const required: Partial<Record<ToolName, Record<string, string>>> = {
  risk: { RISK_CUSTOMER_KEY_PEPPER: "e2e-risk-customer-key-pepper-0123456789abcdef" },
};

/** Starts a service's `node <entry>` with the test keys and waits until it serves (see spawnService). */
export function spawnTool(entry: string, env: Record<string, string>, timeoutMs?: number): Promise<ServiceProcess> {
  return spawnService(entry, { ...TEST_AUTH_ENV, ...env }, timeoutMs);
}

/** `timeoutMs`: how long it may take to serve (spawnService's default when absent). */
export function startTool(
  tool: ToolName,
  dataDir: string,
  port = 0,
  extraEnv: Record<string, string> = {},
  timeoutMs?: number,
): Promise<ServiceProcess> {
  const spec = TOOLS.find((s) => s.name === tool);
  if (!spec) throw new Error(`no tool service "${tool}" in services/ (tools: ${TOOLS.map((s) => s.name).join(", ")})`);
  const env = {
    LOOPGUARD_DATA_DIR: dataDir,
    [`${spec.envPrefix}_PORT`]: String(port),
    [spec.metricsPortEnv]: "0",
    ...required[tool],
    ...extraEnv,
  };
  return spawnTool(spec.entry, env, timeoutMs);
}

export interface StartAllOptions {
  /** More environment for every tool process (e.g. where to send their spans). */
  readonly env?: Record<string, string>;
  readonly timeoutMs?: number;
  /** One after another: on a busy machine three cold starts at once can each miss their start-up timeout. */
  readonly inTurn?: boolean;
}

/** Every tool of the workspace as a process on one data folder, by name; if one fails to start, the others are stopped. */
export async function startAllTools(
  dataDir: string,
  { env = {}, timeoutMs, inTurn = false }: StartAllOptions = {},
): Promise<Record<ToolName, ServiceProcess>> {
  const started: Record<ToolName, ServiceProcess> = {};
  const start = async (spec: ServiceSpec) => {
    started[spec.name] = await startTool(spec.name, dataDir, 0, env, timeoutMs);
  };
  try {
    if (inTurn) for (const spec of TOOLS) await start(spec);
    else {
      // Every start settles first, so none is left running when another failed.
      const failed = (await Promise.allSettled(TOOLS.map(start))).find(
        (r): r is PromiseRejectedResult => r.status === "rejected",
      );
      if (failed) throw failed.reason;
    }
  } catch (error) {
    await Promise.all(Object.values(started).map((p) => kill(p)));
    throw error;
  }
  return started;
}

export interface WorkspaceTools {
  /** Every tool service of the workspace, by name. */
  readonly all: Readonly<Record<ToolName, ServiceProcess>>;
  /** Their data folder (their SQLite files). */
  readonly dataDir: string;
  /** Kills them and removes the folder. */
  stop(): Promise<void>;
}

/** Every tool on a fresh data folder of its own. */
export async function startTools(options: StartAllOptions = {}): Promise<WorkspaceTools> {
  const folder = tempDir("tools");
  try {
    const all = await startAllTools(folder.dir, options);
    return {
      all,
      dataDir: folder.dir,
      async stop() {
        await Promise.all(Object.values(all).map((p) => kill(p)));
        folder.remove();
      },
    };
  } catch (error) {
    folder.remove();
    throw error;
  }
}

/** A process's <PREFIX>_ADDR variables for these running tools (how an orchestrator or gateway finds them). */
export function toolAddressEnv(tools: Readonly<Record<ToolName, ServiceProcess>>): Record<string, string> {
  return Object.fromEntries(
    TOOLS.filter((s) => tools[s.name]).map((s) => [`${s.envPrefix}_ADDR`, tools[s.name]!.address]),
  );
}
