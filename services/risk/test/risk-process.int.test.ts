// dist/main.js as a real process (needs `pnpm build`): config from the environment, the store
// under LOOPGUARD_DATA_DIR, a clean exit on SIGTERM, the same data after a restart, exit 2 on a
// missing pepper, and two replicas on one PostgreSQL answering alike.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { createRawClient } from "@loopguard/tool-sdk";
import { checkHealth, spawnTool, TEST_AUTH_ENV, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "../src/demo-customers.js";
import { TEST_PEPPER } from "./test-keys.js";

const ENTRY = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

describe("risk process", () => {
  const started: ServiceProcess[] = [];
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

  async function start(dataDir: string, env: Record<string, string> = {}): Promise<ServiceProcess> {
    const p = await spawnTool(ENTRY, {
      RISK_PORT: "0",
      RISK_METRICS_PORT: "0",
      LOOPGUARD_DATA_DIR: dataDir,
      RISK_CUSTOMER_KEY_PEPPER: TEST_PEPPER,
      ...env,
    });
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

  /** Runs the process to its exit (it must not get as far as serving), with only the pepper variables given. */
  function runToExit(dataDir: string, env: Record<string, string>) {
    const base: Record<string, string | undefined> = {
      ...process.env,
      ...TEST_AUTH_ENV,
      LOOPGUARD_DATA_DIR: dataDir,
      RISK_PORT: "0",
      RISK_METRICS_PORT: "0",
    };
    delete base.RISK_CUSTOMER_KEY_PEPPER;
    delete base.RISK_CUSTOMER_KEY_PEPPER_FILE;
    return spawnSync(process.execPath, [ENTRY], { env: { ...base, ...env }, encoding: "utf8", timeout: 15_000 });
  }

  it.each([
    ["no pepper", {}],
    ["a pepper of 31 characters", { RISK_CUSTOMER_KEY_PEPPER: "p".repeat(31) }],
  ])("exits 2 naming the pepper variables when given %s", (_, env) => {
    const dataDir = mkdtempSync(join(tmpdir(), "risk-proc-"));
    dirs.push(dataDir);
    const run = runToExit(dataDir, env);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(
      /^risk: configuration error: set RISK_CUSTOMER_KEY_PEPPER_FILE \(or RISK_CUSTOMER_KEY_PEPPER\) to a secret of at least 32 characters/,
    );
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
  });

  it("exits 2 naming RISK_CUSTOMER_KEY_PEPPER_FILE when the file cannot be read", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "risk-proc-"));
    dirs.push(dataDir);
    const run = runToExit(dataDir, { RISK_CUSTOMER_KEY_PEPPER_FILE: join(dataDir, "missing-pepper") });
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(
      /^risk: configuration error: RISK_CUSTOMER_KEY_PEPPER_FILE: cannot read .*missing-pepper \(ENOENT\)\n$/,
    );
  });

  it("reads the pepper from RISK_CUSTOMER_KEY_PEPPER_FILE, never logs it, and refuses a restart with another pepper (exit 2)", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "risk-proc-"));
    dirs.push(dataDir);
    const pepperFile = join(dataDir, "pepper");
    writeFileSync(pepperFile, `${TEST_PEPPER}\n`, { mode: 0o600 });
    const p = await start(dataDir, { RISK_CUSTOMER_KEY_PEPPER: "", RISK_CUSTOMER_KEY_PEPPER_FILE: pepperFile });
    const client = createRawClient(RiskService, p.address, {
      token: await testToken({ subject: "test", scopes: ["risk:read"] }),
    });
    const c = DEMO_CUSTOMERS[1]!;
    expect((await client.queryRisk({ idCard: c.idCard, phone: c.phone })).riskScore).toBe(c.riskScore);
    client.close();
    p.child.kill("SIGTERM");
    expect(await p.exited).toBe(0);
    expect(p.lines.map((l) => JSON.stringify(l)).join("\n")).not.toContain(TEST_PEPPER);
    expect(statSync(join(dataDir, "risk.db")).mode & 0o777).toBe(0o600);

    const other = runToExit(dataDir, { RISK_CUSTOMER_KEY_PEPPER: `${TEST_PEPPER}-rotated` });
    expect(other.status).toBe(2);
    expect(other.stderr).toMatch(
      /^risk: configuration error: the customer key pepper .* is not the one this database's keys were made with\n$/,
    );
  });
});

const postgres = testPostgres("risk_replicas");

describe.skipIf(postgres.skip !== null)("two risk replicas on one PostgreSQL", () => {
  const started: ServiceProcess[] = [];
  const dataDir = mkdtempSync(join(tmpdir(), "risk-replicas-"));
  beforeAll(postgres.start, 120_000);
  afterAll(async () => {
    for (const p of started) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGTERM");
      await p.exited;
    }
    await postgres.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }, 60_000);

  it("migrate and seed once when started together, and answer every customer with the same score", async () => {
    const url = await postgres.freshDatabase();
    const env = {
      RISK_PORT: "0",
      RISK_METRICS_PORT: "0",
      LOOPGUARD_DATA_DIR: dataDir,
      RISK_STORE: url,
      RISK_CUSTOMER_KEY_PEPPER: TEST_PEPPER,
    };
    started.push(...(await Promise.all([spawnTool(ENTRY, env), spawnTool(ENTRY, env)])));
    expect(
      started
        .map(
          (p) => (p.lines.find((l) => l.msg === "risk store open")?.migrations_applied as string[] | undefined)?.length,
        )
        .sort(),
    ).toEqual([0, 4]);
    expect(started.map((p) => p.lines.find((l) => l.msg === "risk store open")?.count)).toEqual([
      DEMO_CUSTOMERS.length,
      DEMO_CUSTOMERS.length,
    ]);
    expect(existsSync(join(dataDir, "risk.db"))).toBe(false);

    const token = await testToken({ subject: "test", scopes: ["risk:read"] });
    const clients = started.map((p) => createRawClient(RiskService, p.address, { token }));
    try {
      for (const c of DEMO_CUSTOMERS) {
        const answers = await Promise.all(
          clients.map((client) => client.queryRisk({ idCard: c.idCard, phone: c.phone })),
        );
        expect(answers.map((a) => [a.riskScore, a.reason])).toEqual([
          [c.riskScore, c.reason],
          [c.riskScore, c.reason],
        ]);
      }
    } finally {
      for (const c of clients) c.close();
    }
  }, 120_000);
});
