// Every tool service as a real process, started one after another: on a busy machine three cold
// starts at once can take longer than spawnTool waits for one.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ToolProcess } from "@loopguard/tool-sdk/testing";
import { kill, startTool, TOOLS, type ToolName } from "../../../test/e2e/processes.js";
import { type Tools, toolsOf } from "./harness.js";

/** `env`: more environment for every tool process (e.g. where to send their spans). */
export async function startToolsInTurn(env: Record<string, string> = {}): Promise<Tools> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-orch-tools-"));
  const all: Record<ToolName, ToolProcess> = {};
  try {
    for (const spec of TOOLS) all[spec.name] = await startTool(spec.name, dataDir, 0, env);
  } catch (error) {
    await Promise.all(Object.values(all).map((p) => kill(p)));
    throw error;
  }
  return toolsOf(all, dataDir);
}
