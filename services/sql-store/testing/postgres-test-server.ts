// Starts a PostgreSQL 15 server for tests, benchmarks and `pnpm containers` (exported as
// "@loopguard/sql-store/testing"): initdb into a fresh temp dir (or a folder of the caller's),
// listen on 127.0.0.1 at a free port (plus a private unix socket dir), stop with `pg_ctl stop -m
// fast`. PostgreSQL refuses to run as root, so as root the binaries run as the `postgres` user.
// Where CI installs the server it sets LOOPGUARD_REQUIRE_POSTGRES=1: a missing server then fails
// the tests instead of skipping them.
import { execFileSync } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "@loopguard/test-kit";
import pg from "pg";

const PG_BIN = process.env.LOOPGUARD_PG_BIN ?? "/usr/lib/postgresql/15/bin";

export interface PostgresServer {
  readonly port: number;
  /** A URL for `database` on this server (the database must exist: see createDatabase). */
  url(database: string): string;
  createDatabase(name: string): Promise<string>;
  /**
   * Stops the server, keeping its data, as an outage would: "fast" ends every connection
   * (clients see them terminated), "immediate" is a crash (recovery runs on the next start).
   */
  halt(mode?: "fast" | "immediate"): Promise<void>;
  /** Starts the halted server again on the same port with the same data. */
  resume(): Promise<void>;
  stop(): Promise<void>;
}

/** Why a server cannot be started here, or null when it can. */
export function postgresUnavailable(): string | null {
  for (const bin of ["initdb", "pg_ctl"]) {
    if (!existsSync(join(PG_BIN, bin))) return `PostgreSQL binaries not found (${join(PG_BIN, bin)} missing)`;
  }
  if (process.getuid?.() === 0 && postgresUid() === null) return "running as root and there is no 'postgres' user";
  return null;
}

/**
 * Why the PostgreSQL tests skip here, or null when they run: they always run when
 * LOOPGUARD_REQUIRE_POSTGRES=1, so that startPostgres fails them if the server is missing.
 */
export function postgresSkipReason(): string | null {
  return process.env.LOOPGUARD_REQUIRE_POSTGRES === "1" ? null : postgresUnavailable();
}

function postgresUid(): { uid: number; gid: number } | null {
  try {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    return { uid, gid };
  } catch {
    return null;
  }
}

export interface StartPostgresOptions {
  /**
   * Keep PostgreSQL's default durability (fsync on), as a deployment would; tests turn it off
   * because a test database need not survive power loss.
   */
  readonly fsync?: boolean;
  /**
   * A folder of the caller's for the server's files, kept after this process exits (a server
   * that outlives its starter, stopped later with stopPostgresIn); a fresh temp folder otherwise.
   */
  readonly dir?: string;
  /** Listen address; 127.0.0.1 by default. */
  readonly host?: string;
  /** Port; a free one by default. */
  readonly port?: number;
  /**
   * Serve TLS only (ssl=on, and TCP clients without TLS refused) with this certificate and key
   * (PEM files; copied, the key kept private); createDatabase then goes through the unix socket.
   */
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
}

function pgRunner(): (bin: string, args: string[]) => string {
  const owner = process.getuid?.() === 0 ? postgresUid() : null;
  return (bin, args) => {
    const [cmd, argv] = owner
      ? ["runuser", ["-u", "postgres", "--", join(PG_BIN, bin), ...args]]
      : [join(PG_BIN, bin), args];
    return execFileSync(cmd, argv, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
  };
}

/** Stops the server started with `dir` and removes its files; nothing happens when none runs there. */
export function stopPostgresIn(dir: string): void {
  try {
    if (existsSync(join(dir, "data", "postmaster.pid")))
      pgRunner()("pg_ctl", ["-D", join(dir, "data"), "-m", "fast", "-w", "stop"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const unavailable = postgresUnavailable();
  if (unavailable) throw new Error(`cannot start PostgreSQL: ${unavailable}`);
  const owner = process.getuid?.() === 0 ? postgresUid() : null;
  const run = pgRunner();
  const host = options.host ?? "127.0.0.1";
  const root = options.dir ?? mkdtempSync(join(tmpdir(), "loopguard-pg-"));
  mkdirSync(root, { recursive: true });
  const dataDir = join(root, "data");
  const sockDir = root;
  if (owner) chownSync(root, owner.uid, owner.gid);
  const port = options.port ?? (await freePort());
  let started = false;
  const stop = async (): Promise<void> => {
    try {
      if (started) run("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "stop"]);
    } finally {
      started = false;
      rmSync(root, { recursive: true, force: true });
    }
  };
  let opts = `-p ${port} -k ${sockDir} -c listen_addresses=${host} -c max_connections=200${options.fsync ? "" : " -c fsync=off"}`;
  if (options.tls) {
    // The server refuses a key file others can read, and must own it when it runs as postgres.
    const [cert, key] = [join(root, "server.crt"), join(root, "server.key")];
    copyFileSync(options.tls.certFile, cert);
    copyFileSync(options.tls.keyFile, key);
    chmodSync(key, 0o600);
    if (owner) for (const file of [cert, key]) chownSync(file, owner.uid, owner.gid);
    opts += ` -c ssl=on -c ssl_cert_file=${cert} -c ssl_key_file=${key}`;
  }
  const startServer = (): void => {
    run("pg_ctl", ["-D", dataDir, "-o", opts, "-l", join(root, "server.log"), "-w", "-t", "60", "start"]);
    started = true;
  };
  try {
    run("initdb", ["-D", dataDir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
    if (options.tls)
      writeFileSync(
        join(dataDir, "pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
      );
    startServer();
  } catch (err) {
    await stop();
    throw err;
  }
  const url = (database: string): string => `postgres://postgres@${host}:${port}/${database}`;
  return {
    port,
    url,
    async createDatabase(name: string): Promise<string> {
      const admin = options.tls
        ? `postgres://postgres@/postgres?host=${encodeURIComponent(sockDir)}&port=${port}`
        : url("postgres");
      const client = new pg.Client({ connectionString: admin });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replace(/"/g, "")}"`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    async halt(mode = "fast") {
      run("pg_ctl", ["-D", dataDir, "-m", mode, "-w", "stop"]);
      started = false;
    },
    async resume() {
      startServer();
    },
    stop,
  };
}

export interface TestPostgres {
  /** Why this file's PostgreSQL tests skip, or null when they run (see postgresSkipReason). */
  readonly skip: string | null;
  /**
   * Starts the file's server (for beforeAll). It never throws: a server that cannot start fails
   * each test that asks for a database, so the tests count as failed, not skipped.
   */
  start(): Promise<void>;
  /** Stops it (for afterAll). */
  stop(): Promise<void>;
  /** A new, empty database on the file's server: one per test keeps tests independent without truncating. */
  freshDatabase(): Promise<string>;
  /** Stops the file's server as an outage would (see PostgresServer.halt); `resume` starts it again. */
  halt(mode?: "fast" | "immediate"): Promise<void>;
  resume(): Promise<void>;
}

/** One throwaway server shared by a test file; `name` prefixes its databases and the skip warning. */
export function testPostgres(name: string, options: StartPostgresOptions = {}): TestPostgres {
  const skip = postgresSkipReason();
  if (skip) console.warn(`[${name}] skipping the PostgreSQL tests: ${skip}`);
  let server: PostgresServer | undefined;
  let failure: unknown = new Error("the PostgreSQL test server was not started (call start in beforeAll)");
  let databases = 0;
  return {
    skip,
    async start() {
      try {
        server = await startPostgres(options);
      } catch (error) {
        failure = error;
      }
    },
    async stop() {
      await server?.stop();
    },
    async freshDatabase() {
      if (!server) throw failure;
      return server.createDatabase(`${name.replace(/\W/g, "_")}_${process.pid}_${++databases}`);
    },
    async halt(mode) {
      if (!server) throw failure;
      await server.halt(mode);
    },
    async resume() {
      if (!server) throw failure;
      await server.resume();
    },
  };
}
