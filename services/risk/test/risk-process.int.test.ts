// dist/main.js as a real process (needs `pnpm build`): config from the environment, the store
// under LOOPGUARD_DATA_DIR, a clean exit on SIGTERM, and the same data after a restart.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { checkHealth, spawnTool, type ToolProcess, testToken } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "../src/demo-customers.js";

const ENTRY = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

describe("risk process", () => {
  const started: ToolProcess[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    for (const p of started.splice(0)) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill("SIGKILL");
        await p.exited;
      }
    }
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  async function start(dataDir: string): Promise<ToolProcess> {
    const p = await spawnTool(ENTRY, { RISK_PORT: "0", RISK_METRICS_PORT: "0", LOOPGUARD_DATA_DIR: dataDir });
    started.push(p);
    return p;
  }

  it("serves demo customers from <dataDir>/risk.db, exits 0 on SIGTERM and keeps its data across a restart", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "risk-proc-"));
    dirs.push(dataDir);
    const token = await testToken({ subject: "test", scopes: ["risk:read"] });
    const c = DEMO_CUSTOMERS[0]!;

    for (let run = 0; run < 2; run += 1) {
      const p = await start(dataDir);
      expect(await checkHealth(p.address)).toBe("SERVING");
      expect(p.lines.find((l) => l.msg === "risk store open")?.count).toBe(DEMO_CUSTOMERS.length);
      const client = createRawClient(RiskService, p.address, { token });
      expect((await client.queryRisk({ idCard: c.idCard, phone: "138 0013 8000" })).riskScore).toBe(c.riskScore);
      client.close();
      p.child.kill("SIGTERM");
      expect(await p.exited).toBe(0);
      const text = p.lines.map((l) => JSON.stringify(l)).join("\n");
      expect(text).not.toContain(c.idCard);
      expect(text).not.toContain("13800138000");
    }
    expect(existsSync(join(dataDir, "risk.db"))).toBe(true);
  });
});
