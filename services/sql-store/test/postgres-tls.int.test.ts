// TLS to a real PostgreSQL 15 that serves TLS only, with a certificate from a throwaway CA: the
// documented URL form (sslmode=verify-full&sslrootcert=<CA file>) connects and migrates; a wrong
// CA, a host the certificate does not name, a missing CA file and an sslmode whose meaning
// depends on the library each fail with an error that says which, never with the password.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PostgresMigration } from "../src/migrate.js";
import { openMigratedPostgres } from "../src/open.js";
import { PostgresTlsError } from "../src/postgres-tls.js";
import { parseStoreUrl } from "../src/store-url.js";
import { makeTestCa, type PostgresServer, postgresSkipReason, startPostgres, type TestCa } from "../testing/index.js";

const MIGRATIONS: PostgresMigration[] = [
  {
    name: "0001-things",
    compatibility: "expand",
    up: async (c) => void (await c.query("CREATE TABLE things (id int)")),
  },
];
const skip = postgresSkipReason();

describe.skipIf(skip !== null)("PostgreSQL over TLS (verify-full)", () => {
  let ca: TestCa;
  let otherCa: TestCa;
  let server: PostgresServer;
  let database: string;
  // The certificate names localhost only: 127.0.0.1 reaches the same server under a name it lacks.
  const url = (host: string, params: string): string =>
    `postgres://postgres:hunter2@${host}:${server.port}/${database}?${params}`;
  const verifyFull = (caFile: string): string => `sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`;

  beforeAll(async () => {
    ca = makeTestCa();
    otherCa = makeTestCa("someone else's CA");
    server = await startPostgres({ host: "localhost", tls: ca.issueServer(["localhost"]) });
    database = (await server.createDatabase("tls")).split("/").pop() ?? "";
  });
  afterAll(async () => {
    await server?.stop();
    ca?.remove();
    otherCa?.remove();
  });

  const openError = async (storeUrl: string): Promise<Error> => {
    const error = await openMigratedPostgres(storeUrl, "things", MIGRATIONS).then(
      async ({ db }) => {
        await db.end();
        return new Error("connected");
      },
      (e: unknown) => e as Error,
    );
    expect(`${error.message} ${String(error.cause)}`).not.toContain("hunter2");
    return error;
  };

  it("connects, migrates and queries with sslmode=verify-full and the CA in sslrootcert, over TLS", async () => {
    const storeUrl = url("localhost", verifyFull(ca.caFile));
    expect(parseStoreUrl(storeUrl, "BILLING_STORE").kind).toBe("postgres");
    const { db, applied } = await openMigratedPostgres(storeUrl, "things", MIGRATIONS);
    try {
      expect(applied).toEqual(["0001-things"]);
      const { rows } = await db.query<{ ssl: boolean }>("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()");
      expect(rows).toEqual([{ ssl: true }]);
    } finally {
      await db.end();
    }
  });

  it("refuses a server whose certificate another CA signed, saying so", async () => {
    const error = await openError(url("localhost", verifyFull(otherCa.caFile)));
    expect(error).toBeInstanceOf(PostgresTlsError);
    expect(error.message).toMatch(
      /^PostgreSQL at localhost:\d+: the server's certificate does not verify against the CA in sslrootcert=.*ca\.crt/,
    );
  });

  it("refuses a host name the certificate does not list, saying so", async () => {
    const error = await openError(url("127.0.0.1", verifyFull(ca.caFile)));
    expect(error).toBeInstanceOf(PostgresTlsError);
    expect(error.message).toMatch(/^PostgreSQL at 127\.0\.0\.1:\d+: the server's certificate does not name this host/);
  });

  it("names a CA file that is not there, at configuration and at open", async () => {
    const missing = join(ca.caFile, "..", "no-such-ca.crt");
    const storeUrl = url("localhost", verifyFull(missing));
    expect(() => parseStoreUrl(storeUrl, "RISK_STORE")).toThrow(
      /^RISK_STORE: PostgreSQL at localhost:\d+: cannot read the CA file sslrootcert=.*no-such-ca\.crt \(ENOENT\)/,
    );
    const error = await openError(storeUrl);
    expect(error).toBeInstanceOf(PostgresTlsError);
    expect(error.message).toContain("no-such-ca.crt (ENOENT)");
  });

  it("refuses sslmode=require, whose meaning differs between node-postgres and libpq", () => {
    expect(() => parseStoreUrl(url("localhost", "sslmode=require"), "ORCHESTRATOR_STORE")).toThrow(
      /sslmode=require is not supported.*use sslmode=verify-full&sslrootcert=/,
    );
  });

  it("is served over TLS only: a client without TLS is refused", async () => {
    const error = await openError(url("localhost", "sslmode=disable"));
    expect(error.message).toMatch(/no pg_hba\.conf entry .* no encryption/);
  });
});
