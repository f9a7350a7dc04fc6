// The stateful services on a PostgreSQL 15 that serves TLS only, with a certificate from a
// throwaway CA, their stores named the documented way (sslmode=verify-full&sslrootcert=<CA file>):
// billing and risk as real processes, the orchestrator's session store as the orchestrator opens
// it. A process given someone else's CA does not start and says why. Demo data follows
// <SERVICE>_SEED_DEMO: seeded by default (local runs), never with "false" (production).
import { spawnSync } from "node:child_process";
import { kill, tempDir } from "@loopguard/test-kit";
import { createPostgresPool } from "@loopguard/sql-store";
import {
  makeTestCa,
  type PostgresServer,
  postgresSkipReason,
  startPostgres,
  type TestCa,
} from "@loopguard/sql-store/testing";
import { startTool, TEST_AUTH_ENV, TOOLS } from "@loopguard/tool-sdk/testing";
import { openSessionStore } from "@loopguard/orchestrator";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const skip = postgresSkipReason();

describe.skipIf(skip !== null)("stores over TLS with sslmode=verify-full and a mounted CA", () => {
  let ca: TestCa;
  let otherCa: TestCa;
  let server: PostgresServer;
  const data = tempDir("e2e");
  const verifyFull = (caFile: string) => `sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`;
  /** A new database, named as a store URL the way the README documents it (the password is never checked here). */
  const store = async (name: string, caFile = ca.caFile): Promise<string> =>
    `${(await server.createDatabase(name)).replace("postgres@", "postgres:hunter2@")}?${verifyFull(caFile)}`;
  const count = async (url: string, table: string): Promise<number> => {
    const pool = createPostgresPool(url);
    try {
      return Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]?.n);
    } finally {
      await pool.end();
    }
  };

  beforeAll(async () => {
    ca = makeTestCa();
    otherCa = makeTestCa("someone else's CA");
    server = await startPostgres({ host: "localhost", tls: ca.issueServer(["localhost"]) });
  });
  afterAll(async () => {
    await server?.stop();
    ca?.remove();
    otherCa?.remove();
    data.remove();
  });

  it.each([
    ["billing", "BILLING", "orders"],
    ["risk", "RISK", "customers"],
  ])(
    "%s serves from its store over TLS; demo rows only when %s_SEED_DEMO is not false",
    async (tool, prefix, table) => {
      const seeded = await store(`${tool}_seeded`);
      const empty = await store(`${tool}_prod`);
      const runs = [
        await startTool(tool, data.dir, 0, { [`${prefix}_STORE`]: seeded, [`${prefix}_STORE_POOL_SIZE`]: "2" }),
      ];
      runs.push(await startTool(tool, data.dir, 0, { [`${prefix}_STORE`]: empty, [`${prefix}_SEED_DEMO`]: "false" }));
      await Promise.all(runs.map((run) => kill(run, "SIGTERM")));
      expect(await count(seeded, table)).toBeGreaterThan(0);
      expect(await count(empty, table)).toBe(0);
    },
  );

  it("the orchestrator's session store opens, migrates and listens over TLS", async () => {
    const sessions = await openSessionStore(await store("orchestrator"));
    await sessions.close();
  });

  it("billing given another CA's file exits 1 saying the certificate does not verify, without the password", async () => {
    const billing = TOOLS.find((s) => s.name === "billing")!;
    const run = spawnSync(process.execPath, [billing.entry], {
      env: {
        ...process.env,
        ...TEST_AUTH_ENV,
        LOOPGUARD_DATA_DIR: data.dir,
        BILLING_PORT: "0",
        BILLING_METRICS_PORT: "0",
        BILLING_STORE: await store("billing_wrong_ca", otherCa.caFile),
      },
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(run.status).toBe(1);
    expect(run.stdout + run.stderr).toMatch(
      /"error_name":"PostgresTlsError".*the server's certificate does not verify against the CA in sslrootcert=/,
    );
    expect(run.stdout + run.stderr).not.toContain("hunter2");
  });
});
