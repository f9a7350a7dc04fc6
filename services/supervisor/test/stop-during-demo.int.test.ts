// `pnpm start` stopped (SIGTERM) while its demo session runs: it stops the suite and says nothing
// of a suite that keeps running. Started from a shell whose addresses point elsewhere, the suite's
// demo reaches its own services still. The whole suite on its own ports, so this file runs it once.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, expect, it, vi } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const clean of cleanups.splice(0).reverse()) clean();
});

it("stopped during the demo, it does not tell that the suite keeps running", async () => {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-demo-stop-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const suite = spawn(process.execPath, [MAIN], {
    env: {
      ...process.env,
      LOOPGUARD_DATA_DIR: join(dir, "data"),
      // Its port locks in a folder of this test's own.
      TMPDIR: dir,
      // Each tool call lasts, so the demo session is still running when the stop comes.
      LOOPGUARD_FAULT_PROFILE: JSON.stringify({ addedLatencyMs: 4000 }),
      // Left in the shell from another suite: neither the demo nor the orchestrator may follow them.
      ORCHESTRATOR_ADDR: "127.0.0.1:1",
      KB_SEARCH_ADDR: "127.0.0.1:1",
      BILLING_ADDR: "127.0.0.1:1",
      RISK_ADDR: "127.0.0.1:1",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  cleanups.push(() => suite.kill("SIGKILL"));
  let said = "";
  suite.stdout.on("data", (chunk) => {
    said += chunk;
  });
  suite.stderr.on("data", (chunk) => {
    said += chunk;
  });
  const exited = new Promise<number | null>((done) => suite.once("exit", done));
  // The suite's own kb-search took the call and was late (at 127.0.0.1:1 it would be UNAVAILABLE).
  await vi.waitFor(() => expect(said).toContain("kb_search_search: DEADLINE_EXCEEDED"), {
    timeout: 45_000,
    interval: 100,
  });
  suite.kill("SIGTERM");
  expect(await exited).toBe(0);
  expect(said).toContain('"msg":"stopping the suite"');
  expect(said).not.toContain("The suite keeps running");
  expect(said).toContain("ORCHESTRATOR_ADDR from the environment (127.0.0.1:1) is not used");
});
