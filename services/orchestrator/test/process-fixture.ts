// What the process-level drills share: the three tools and orchestrators as real processes
// (dist/main.js, so `pnpm build` first) on fresh data folders, clients with test tokens, and one
// clean-up (for afterEach) that closes clients, stops what was started and removes the folders.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { DescService } from "@bufbuild/protobuf";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import { spawnTool, type ToolProcess, testOrchestratorEnv, testToken } from "@loopguard/tool-sdk/testing";
import { kill, startAllTools, toolAddressEnv } from "../../../test/e2e/processes.js";

export const ORCHESTRATOR_ENTRY = resolve(dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

export interface ProcessTools {
  /** Every tool service of the workspace, by name. */
  readonly all: Readonly<Record<string, ToolProcess>>;
  readonly kb: ToolProcess;
  readonly billing: ToolProcess;
  readonly risk: ToolProcess;
  /** The data folder of the tools (their SQLite files). */
  readonly dir: string;
}

export function processFixture(prefix: string) {
  const processes: ToolProcess[] = [];
  const clients: { close(): void }[] = [];
  const dirs: string[] = [];
  const closers: (() => Promise<void>)[] = [];

  function tempDir(name: string): string {
    const dir = mkdtempSync(join(tmpdir(), `loopguard-${prefix}-${name}-`));
    dirs.push(dir);
    return dir;
  }

  function track<T extends { close(): void }>(client: T): T {
    clients.push(client);
    return client;
  }

  /** `audience`: the tool served at `address`, needed when the scopes alone do not name it (tool:admin). */
  async function clientFor<S extends DescService>(
    service: S,
    address: string,
    scopes: readonly string[],
    options: { audience?: string; subject?: string } = {},
  ): Promise<RawClient<S>> {
    const token = await testToken({
      subject: options.subject ?? prefix,
      scopes,
      ttlSeconds: 600,
      ...(options.audience ? { audience: options.audience } : {}),
    });
    return track(createRawClient(service, address, { token }));
  }

  /** Every tool as a process on a fresh data folder, so the ledger holds this drill's refunds only. */
  async function startTools(kbLatencyMs = 0, env: Record<string, string> = {}): Promise<ProcessTools> {
    const dir = tempDir("tools");
    const all = await startAllTools(dir, env);
    processes.push(...Object.values(all));
    const [kb, billing, risk] = [all["kb-search"]!, all.billing!, all.risk!];
    if (kbLatencyMs > 0) {
      const admin = await clientFor(ToolAdminService, kb.address, ["tool:admin"], { audience: "kb-search" });
      await admin.setFaults({ profile: { addedLatencyMs: kbLatencyMs } });
    }
    return { all, kb, billing, risk, dir };
  }

  async function startOrchestrator(tools: ProcessTools, env: Record<string, string>): Promise<ToolProcess> {
    const proc = await spawnTool(ORCHESTRATOR_ENTRY, {
      ...testOrchestratorEnv(),
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      ...toolAddressEnv(tools.all),
      ORCHESTRATOR_LEASE_TTL_MS: "1000",
      ...env,
    });
    processes.push(proc);
    return proc;
  }

  async function cleanUp(): Promise<void> {
    for (const c of clients.splice(0)) c.close();
    await Promise.all(closers.splice(0).map((close) => close()));
    await Promise.all(processes.splice(0).map((p) => kill(p)));
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }

  return {
    tempDir,
    track,
    clientFor,
    startTools,
    startOrchestrator,
    cleanUp,
    onCleanUp: (close: () => Promise<void>) => closers.push(close),
  };
}
