// The migration step as a real process (dist/main.js, run `pnpm build` first) on real SQLite and
// PostgreSQL 15: `migrate` applies once and a concurrent run waits for the lock, then finds the
// schema current; `wait-for-schema` returns once another made it current; a serving process that
// must not migrate (BILLING_MIGRATE_ON_START=false, as every pod runs) refuses a schema it lacks
// migrations of, or a later release's contract migration it cannot run on, with the reason.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { MIGRATIONS_TABLE, migrationLock } from "@loopguard/sql-store";
import { testPostgres } from "@loopguard/sql-store/testing";
import { spawnTool, TEST_AUTH_ENV } from "@loopguard/tool-sdk/testing";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const NAMES = ["0001-orders-and-refunds", "0002-break-glass-refunds", "0003-refunds-by-order-made"];

interface Run {
  readonly child: ChildProcess;
  readonly done: Promise<{ code: number | null; stdout: string; stderr: string }>;
}

function run(args: string[], env: Record<string, string>): Run {
  const child = spawn(process.execPath, [MAIN, ...args], {
    env: { ...process.env, ...TEST_AUTH_ENV, BILLING_PORT: "0", BILLING_METRICS_PORT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  return { child, done: new Promise((resolve) => child.once("exit", (code) => resolve({ code, stdout, stderr }))) };
}

/** What a serving process that refused to start logged as its reason. */
async function refusal(env: Record<string, string>): Promise<{ code: number | null; reason: string }> {
  const { code, stdout } = await run([], { BILLING_MIGRATE_ON_START: "false", ...env }).done;
  const failed = stdout
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((r) => r.msg === "failed to start");
  return { code, reason: String(failed?.error_message ?? `no "failed to start" line in: ${stdout}`) };
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "billing-schema-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("billing's migration step on SQLite", () => {
  it("refuses to serve on a file it lacks migrations of, migrates once, then serves without migrating", async () => {
    const env = { LOOPGUARD_DATA_DIR: dir, BILLING_STORE: `sqlite:${join(dir, "billing.db")}` };
    const refused = await refusal(env);
    expect(refused.code).toBe(1);
    expect(refused.reason).toContain(
      `the billing schema lacks 3 migration(s) this build needs (${NAMES.join(", ")}): run the migration step first`,
    );

    const waiting = run(["wait-for-schema", "--timeout", "30"], env);
    await sleep(1500);
    expect(waiting.child.exitCode).toBeNull();
    const first = await run(["migrate"], env).done;
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.stdout).toContain(`billing: applied 3 migration(s) to sqlite:${join(dir, "billing.db")}`);
    expect(await waiting.done).toMatchObject({
      code: 0,
      stdout: `billing: the schema at sqlite:${join(dir, "billing.db")} is current\n`,
    });
    expect((await run(["migrate"], env).done).stdout).toContain("is current (nothing to apply)");

    const serving = await spawnTool(MAIN, {
      ...env,
      BILLING_PORT: "0",
      BILLING_METRICS_PORT: "0",
      BILLING_MIGRATE_ON_START: "false",
    });
    expect(serving.lines.find((l) => l.msg === "ledger open")?.migrations_applied).toEqual([]);
    serving.child.kill("SIGTERM");
    expect(await serving.exited).toBe(0);
  }, 60_000);

  it("gives up waiting at its timeout with what is missing", async () => {
    const env = { LOOPGUARD_DATA_DIR: dir, BILLING_STORE: `sqlite:${join(dir, "never.db")}` };
    const { code, stderr } = await run(["wait-for-schema", "--timeout", "1"], env).done;
    expect(code).toBe(1);
    expect(stderr).toContain("did not become current within 1 s: the billing schema lacks 3 migration(s)");
  });
});

const postgres = testPostgres("billing_schema");

describe.skipIf(postgres.skip !== null)("billing's migration step on PostgreSQL", () => {
  beforeAll(postgres.start, 120_000);
  afterAll(postgres.stop);

  it("runs twice at once: one applies while the other waits for the lock, then finds the schema current", async () => {
    const url = await postgres.freshDatabase();
    const env = { LOOPGUARD_DATA_DIR: dir, BILLING_STORE: url };
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      // A migration in progress elsewhere: both runs must wait for its lock.
      await holder.query("SELECT pg_advisory_lock($1, $2)", migrationLock("billing"));
      const runs = [run(["migrate"], env), run(["migrate"], env)];
      await sleep(2000);
      expect(runs.map((r) => r.child.exitCode)).toEqual([null, null]);
      await holder.query("SELECT pg_advisory_unlock($1, $2)", migrationLock("billing"));
      const results = await Promise.all(runs.map((r) => r.done));
      expect(results.map((r) => r.code)).toEqual([0, 0]);
      const outputs = results.map((r) => r.stdout.trim()).sort();
      expect(outputs[0]).toMatch(
        /^billing: applied 3 migration\(s\) to postgres:.* 0001-orders-and-refunds, 0002-break-glass-refunds, 0003-refunds-by-order-made; the schema is current$/,
      );
      expect(outputs[1]).toMatch(/^billing: the schema at postgres:.* is current \(nothing to apply\)$/);
      const ledger = await holder.query(
        `SELECT name, compatibility, contract_after FROM ${MIGRATIONS_TABLE} WHERE store = 'billing' ORDER BY name`,
      );
      expect(ledger.rows).toEqual(NAMES.map((name) => ({ name, compatibility: "expand", contract_after: null })));
    } finally {
      await holder.end();
    }
  }, 60_000);

  it("refuses to serve before the migration step, and on a later release's contract migration it has no expand step of", async () => {
    const url = await postgres.freshDatabase();
    const env = { LOOPGUARD_DATA_DIR: dir, BILLING_STORE: url };
    const before = await refusal(env);
    expect(before.code).toBe(1);
    expect(before.reason).toContain("the billing schema lacks 3 migration(s) this build needs");

    expect((await run(["migrate"], env).done).code).toBe(0);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // A later release dropped something this build uses; its expand step is one this build never had.
      await client.query(
        `INSERT INTO ${MIGRATIONS_TABLE} (store, name, compatibility, contract_after) VALUES ('billing', '0005-drop-refund-reason', 'contract', '0004-refund-reason-code')`,
      );
      const after = await refusal(env);
      expect(after.code).toBe(1);
      expect(after.reason).toContain(
        "the billing schema has contract migration(s) of a later release that this build cannot run on (0005-drop-refund-reason)",
      );
      // Its expand step is this build's own: this build already runs without what it removed.
      await client.query(
        `UPDATE ${MIGRATIONS_TABLE} SET contract_after = '0002-break-glass-refunds' WHERE name = '0005-drop-refund-reason'`,
      );
      const serving = await spawnTool(MAIN, {
        ...env,
        BILLING_PORT: "0",
        BILLING_METRICS_PORT: "0",
        BILLING_MIGRATE_ON_START: "false",
      });
      serving.child.kill("SIGTERM");
      expect(await serving.exited).toBe(0);
    } finally {
      await client.end();
    }
  }, 60_000);
});
