// A throwaway PostgreSQL 15 for benchmarks (the same recipe as the orchestrator's test helper,
// which lives outside this package's sources): initdb into a temp dir, listen on loopback at a
// free port, stop with `pg_ctl stop -m fast`. As root the binaries run as the `postgres` user.
import { execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

const PG_BIN = process.env.LOOPGUARD_PG_BIN ?? "/usr/lib/postgresql/15/bin";

export interface BenchPostgres {
  /** URL of a fresh database on the server. */
  readonly url: string;
  stop(): void;
}

function postgresIds(): { uid: number; gid: number } | null {
  try {
    const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
    return { uid: id("-u"), gid: id("-g") };
  } catch {
    return null;
  }
}

/** Why PostgreSQL cannot be started here, or null when it can. */
export function postgresUnavailable(): string | null {
  for (const bin of ["initdb", "pg_ctl"]) if (!existsSync(join(PG_BIN, bin))) return `${join(PG_BIN, bin)} is missing`;
  if (process.getuid?.() === 0 && postgresIds() === null) return "running as root and there is no 'postgres' user";
  return null;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export async function startBenchPostgres(): Promise<BenchPostgres> {
  const owner = process.getuid?.() === 0 ? postgresIds() : null;
  const run = (bin: string, args: string[]) =>
    owner
      ? execFileSync("runuser", ["-u", "postgres", "--", join(PG_BIN, bin), ...args], { stdio: "ignore", timeout: 60_000 })
      : execFileSync(join(PG_BIN, bin), args, { stdio: "ignore", timeout: 60_000 });
  const root = mkdtempSync(join(tmpdir(), "loopguard-bench-pg-"));
  if (owner) chownSync(root, owner.uid, owner.gid);
  const dataDir = join(root, "data");
  const port = await freePort();
  let started = false;
  const stop = () => {
    try {
      if (started) run("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "stop"]);
    } finally {
      started = false;
      rmSync(root, { recursive: true, force: true });
    }
  };
  try {
    run("initdb", ["-D", dataDir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
    // Default durability (fsync on): the figure is meant to be what a deployment would see.
    run("pg_ctl", ["-D", dataDir, "-o", `-p ${port} -k ${root} -c listen_addresses=127.0.0.1`, "-l", join(root, "server.log"), "-w", "-t", "60", "start"]);
    started = true;
    const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
    await admin.connect();
    await admin.query(`CREATE DATABASE bench`);
    await admin.end();
  } catch (error) {
    stop();
    throw error;
  }
  return { url: `postgres://postgres@127.0.0.1:${port}/bench`, stop };
}
