// What the process-level drills share: the three tools and orchestrators as real processes
// (dist/main.js, so `pnpm build` first) on fresh data folders, clients with test tokens, and one
// clean-up (for afterEach) that closes clients, stops what was started and removes the folders.
import type { DescService } from "@bufbuild/protobuf";
import { kill, type ServiceProcess, tempDir as makeTempDir } from "@loopguard/test-kit";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import {
  spawnTool,
  testOrchestratorEnv,
  testToken,
  toolAddressEnv,
  workspaceService,
} from "@loopguard/tool-sdk/testing";
import { setFaults, startTools as startHarnessTools, type Tools } from "./harness.js";

export function processFixture(prefix: string) {
  const processes: ServiceProcess[] = [];
  const clients: { close(): void }[] = [];
  const dirs: (() => void)[] = [];
  const closers: (() => Promise<void>)[] = [];

  function tempDir(name: string): string {
    const folder = makeTempDir(`${prefix}-${name}`);
    dirs.push(folder.remove);
    return folder.dir;
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
  async function startTools(kbLatencyMs = 0, env: Record<string, string> = {}): Promise<Tools> {
    const tools = await startHarnessTools({ env });
    closers.push(() => tools.stop());
    if (kbLatencyMs > 0) await setFaults(tools, "kb-search", { addedLatencyMs: kbLatencyMs });
    return tools;
  }

  async function startOrchestrator(tools: Tools, env: Record<string, string>): Promise<ServiceProcess> {
    const proc = await spawnTool(workspaceService("orchestrator").entry, {
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
    for (const remove of dirs.splice(0)) remove();
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
