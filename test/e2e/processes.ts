// Where the built services live and how to start them as real processes on loopback.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnTool, type ToolProcess } from "@loopguard/tool-sdk/testing";

/** The repository's root folder. */
export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export const entries = {
  "kb-search": join(root, "services", "kb-search", "dist", "main.js"),
  billing: join(root, "services", "billing", "dist", "main.js"),
  risk: join(root, "services", "risk", "dist", "main.js"),
} as const;

const prefixes = { "kb-search": "KB_SEARCH", billing: "BILLING", risk: "RISK" } as const;

export type ToolName = keyof typeof entries;

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

export function startTool(tool: ToolName, dataDir: string, port = 0, extraEnv: Record<string, string> = {}): Promise<ToolProcess> {
  const prefix = prefixes[tool];
  return spawnTool(entries[tool], {
    LOOPGUARD_DATA_DIR: dataDir,
    [`${prefix}_PORT`]: String(port),
    [`${prefix}_METRICS_PORT`]: "0",
    ...required[tool],
    ...extraEnv,
  });
}

/** SIGKILL and wait until the process is gone. */
export async function kill(proc: ToolProcess, signal: NodeJS.Signals = "SIGKILL"): Promise<number | string> {
  if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill(signal);
  return proc.exited;
}
