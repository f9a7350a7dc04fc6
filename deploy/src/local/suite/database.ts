// The store of each stateful service: SQLite in its pod, or one PostgreSQL shared by the services
// that run several replicas, with a database each. PostgreSQL runs from the host's initdb and
// pg_ctl through sql-store's server helper: no PostgreSQL image is among the suite's images.
import { join } from "node:path";
import { startPostgres, stopPostgresIn } from "@loopguard/sql-store/testing";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { unpooledClient } from "@loopguard/sql-store";
import { POSTGRES_PORT } from "../../manifests/cluster-names.js";
import { requireFree } from "./ports.js";
import { activePods, dnsName, type Store, type SuiteFiles, SuiteError, type SuiteState } from "./state.js";

const POSTGRES_ADDRESS = "127.0.0.8";

/** The store of a stateful service: PostgreSQL when it runs several replicas, SQLite in its pod otherwise. */
export function storeFor(spec: ServiceSpec, state: SuiteState, count: number): Store | undefined {
  if (!spec.stateful) return undefined;
  const current = state.stores[spec.name];
  if (count <= 1) return current ?? "sqlite";
  if (current === "sqlite" && activePods(state, spec.name).length > 0) {
    throw new SuiteError(
      `${spec.name} runs on SQLite in its pod; ${count} replicas need PostgreSQL: ` +
        `\`pnpm containers down\`, then \`pnpm containers up --replicas ${spec.name}=${count}\``,
    );
  }
  return "postgres";
}

/** The DSN a pod of the service connects with, through the cluster DNS's `postgres` name. */
export function postgresUrl(service: string): string {
  return `postgres://postgres@${dnsName("postgres")}:${POSTGRES_PORT}/${databaseOf(service)}`;
}

/** A PostgreSQL for the services whose replicas share a store, with a database for each. */
export async function ensurePostgres(files: SuiteFiles, state: SuiteState, log: (line: string) => void): Promise<void> {
  if (!state.postgres) {
    const dir = join(files.stateDir, "postgres");
    await requireFree(POSTGRES_ADDRESS, [POSTGRES_PORT]);
    await startPostgres({ dir, host: POSTGRES_ADDRESS, port: POSTGRES_PORT, fsync: true });
    state.postgres = { dir, address: POSTGRES_ADDRESS, port: POSTGRES_PORT };
    files.save(state);
    log(`PostgreSQL on ${POSTGRES_ADDRESS}:${POSTGRES_PORT} (${dnsName("postgres")})`);
  }
  const client = unpooledClient({
    connectionString: `postgres://postgres@${state.postgres.address}:${state.postgres.port}/postgres`,
  });
  await client.connect();
  try {
    for (const [service, store] of Object.entries(state.stores)) {
      const database = databaseOf(service);
      const exists = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
      if (store === "postgres" && exists.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`);
    }
  } finally {
    await client.end();
  }
}

export function stopPostgres(state: SuiteState): void {
  if (state.postgres) stopPostgresIn(state.postgres.dir);
}

function databaseOf(service: string): string {
  return service.replace(/[^a-z0-9]+/g, "_");
}
