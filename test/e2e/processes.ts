// Where the built services live (from their manifests) and how to start them as real processes on loopback.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import { spawnTool, type ToolProcess } from "@loopguard/tool-sdk/testing";

/** The repository's root folder. */
export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Every tool service of the workspace, read from the manifests (each services/<name>/package.json). */
export const TOOLS: readonly ServiceSpec[] = discoverServices(join(root, "services")).filter((s) => s.kind === "tool");

/** A tool service's folder name, which is its contract's tool name, e.g. "kb-search". */
export type ToolName = string;

/** Settings a tool cannot start without, beyond the common ones spawnTool gives every process. */
const required: Partial<Record<ToolName, Record<string, string>>> = {
  risk: { RISK_CUSTOMER_KEY_PEPPER: "e2e-risk-customer-key-pepper-0123456789abcdef" },
};

/** A port that was free a moment ago, so a restarted process can come back on the same one. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolvePort(port));
    });
  });
}

export function tempDataDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-e2e-"));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `timeoutMs`: how long it may take to serve (spawnTool's default when absent). */
export function startTool(
  tool: ToolName,
  dataDir: string,
  port = 0,
  extraEnv: Record<string, string> = {},
  timeoutMs?: number,
): Promise<ToolProcess> {
  const spec = TOOLS.find((s) => s.name === tool);
  if (!spec) throw new Error(`no tool service "${tool}" in services/ (tools: ${TOOLS.map((s) => s.name).join(", ")})`);
  return spawnTool(
    spec.entry,
    {
      LOOPGUARD_DATA_DIR: dataDir,
      [`${spec.envPrefix}_PORT`]: String(port),
      [spec.metricsPortEnv]: "0",
      ...required[tool],
      ...extraEnv,
    },
    timeoutMs,
  );
}

/** Every tool of the workspace as a process on one data folder, by name. */
export async function startAllTools(
  dataDir: string,
  extraEnv: Record<string, string> = {},
  timeoutMs?: number,
): Promise<Record<ToolName, ToolProcess>> {
  return Object.fromEntries(
    await Promise.all(
      TOOLS.map(async (spec) => [spec.name, await startTool(spec.name, dataDir, 0, extraEnv, timeoutMs)] as const),
    ),
  );
}

/** An orchestrator's <PREFIX>_ADDR variables for these running tools. */
export function toolAddressEnv(tools: Readonly<Record<ToolName, ToolProcess>>): Record<string, string> {
  return Object.fromEntries(
    TOOLS.filter((s) => tools[s.name]).map((s) => [`${s.envPrefix}_ADDR`, tools[s.name]!.address]),
  );
}

/** SIGKILL and wait until the process is gone. */
export async function kill(proc: ToolProcess, signal: NodeJS.Signals = "SIGKILL"): Promise<number | string> {
  if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill(signal);
  return proc.exited;
}
