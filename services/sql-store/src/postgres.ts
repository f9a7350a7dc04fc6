// PostgreSQL connections for stores shared by several replicas: every wait is bounded (connect,
// statement, lock, idle transaction, and a client-side read timeout for a network that stops
// answering), failures that mean "the database is unreachable right now" are recognisable, and
// transactions retry where PostgreSQL asks for it.
import { createRequire } from "node:module";
import type pg from "pg";
import type { parse } from "pg-connection-string";
import { observePool, type PoolObserver } from "./postgres-observer.js";
import { PostgresTlsError, postgresTlsProblem } from "./postgres-tls.js";

const require = createRequire(import.meta.url);
let loaded: typeof pg | undefined;

/**
 * node-postgres, loaded on first use rather than with this module: importing it costs a process start about 90 ms
 * of CPU, which a process whose stores are all SQLite would pay for nothing. Code of a PostgreSQL store reaches the
 * driver's values (its classes) through this, and imports only its types.
 */
export function postgresDriver(): typeof pg {
  loaded ??= require("pg") as typeof pg;
  return loaded;
}
function parseConnectionString(url: string): ReturnType<typeof parse> {
  return (require("pg-connection-string") as { parse: typeof parse }).parse(url);
}

export interface PostgresOptions {
  readonly maxConnections?: number;
  /** Waiting for a connection, new or from the pool. */
  readonly connectTimeoutMs?: number;
  readonly statementTimeoutMs?: number;
  /** Waiting for a row or table lock held by another transaction. */
  readonly lockTimeoutMs?: number;
  /** A transaction left open by a stuck client is ended by the server after this, releasing its locks. */
  readonly idleInTransactionTimeoutMs?: number;
  readonly applicationName?: string;
  /** Errors of idle pooled connections (the server restarted, the network dropped); the pool replaces them. */
  readonly onIdleError?: (error: Error) => void;
  /** Told of every statement the pool sends and every wait for a connection, for a deployment's metrics. */
  readonly observer?: PoolObserver;
  /**
   * Send a connection's statements without waiting for the one before to be answered, so that a
   * caller issuing several at once (a transaction's BEGIN and first statement) pays one round trip.
   */
  readonly pipeline?: boolean;
}

export const POSTGRES_DEFAULTS = {
  maxConnections: 10,
  connectTimeoutMs: 5000,
  statementTimeoutMs: 5000,
  lockTimeoutMs: 5000,
  idleInTransactionTimeoutMs: 10_000,
} as const;

/** The largest pool a replica may ask for (<PREFIX>_STORE_POOL_SIZE): more would only queue inside PostgreSQL. */
export const MAX_STORE_POOL_SIZE = 100;

/** How much longer than the server's own timeouts the client waits before it gives up on a reply. */
const READ_TIMEOUT_MARGIN_MS = 1000;

const INT8_OID = 20;
const safeInteger = (text: string): number => {
  const value = Number(text);
  if (!Number.isSafeInteger(value)) throw new RangeError(`bigint ${text} does not fit a JavaScript number`);
  return value;
};

/**
 * Connection settings from `options`, except that settings in the URL's query
 * (`?statement_timeout=8000&lock_timeout=…`) win, so an operator can tune a deployment without a
 * new build; the client-side read timeout follows whichever server timeout is larger.
 */
export function postgresClientConfig(url: string, options: PostgresOptions = {}): pg.ClientConfig {
  // Parsing reads the sslrootcert file: a missing one would otherwise surface as a bare ENOENT.
  const tlsProblem = postgresTlsProblem(url);
  if (tlsProblem !== null) throw new PostgresTlsError(tlsProblem);
  const fromUrl = parseConnectionString(url) as Record<string, unknown>;
  const ms = (name: string, fallback: number): number => {
    const raw = fromUrl[name];
    const value = typeof raw === "string" ? Number(raw) : Number.NaN;
    return Number.isFinite(value) && value >= 0 ? value : fallback;
  };
  const statementTimeout = ms("statement_timeout", options.statementTimeoutMs ?? POSTGRES_DEFAULTS.statementTimeoutMs);
  const lockTimeout = ms("lock_timeout", options.lockTimeoutMs ?? POSTGRES_DEFAULTS.lockTimeoutMs);
  // int8 columns (cents, epoch milliseconds) as numbers, refusing any that would lose precision.
  const { TypeOverrides } = postgresDriver();
  const types = new TypeOverrides();
  types.setTypeParser(INT8_OID, safeInteger);
  return {
    connectionString: url,
    connectionTimeoutMillis: options.connectTimeoutMs ?? POSTGRES_DEFAULTS.connectTimeoutMs,
    statement_timeout: statementTimeout,
    lock_timeout: lockTimeout,
    idle_in_transaction_session_timeout:
      options.idleInTransactionTimeoutMs ?? POSTGRES_DEFAULTS.idleInTransactionTimeoutMs,
    query_timeout: ms("query_timeout", Math.max(statementTimeout, lockTimeout) + READ_TIMEOUT_MARGIN_MS),
    keepAlive: true,
    application_name: options.applicationName ?? "loopguard",
    types,
  };
}

/**
 * A connection outside the pool (a migration, a schema check, a setup command). A lost connection
 * fails the statement in flight; unheard, its 'error' event would end the process.
 */
export function unpooledClient(config: pg.ClientConfig): pg.Client {
  const { Client } = postgresDriver();
  const client = new Client(config);
  client.on("error", () => undefined);
  return client;
}

export function createPostgresPool(url: string, options: PostgresOptions = {}): pg.Pool {
  const { Pool } = postgresDriver();
  const pool = new Pool({
    ...postgresClientConfig(url, options),
    max: options.maxConnections ?? POSTGRES_DEFAULTS.maxConnections,
    pipeline: options.pipeline ?? false,
  });
  // Without a listener an idle connection's error would crash the process.
  pool.on("error", (error) => options.onIdleError?.(error));
  if (options.observer) observePool(pool, options.observer);
  return pool;
}

/** SQLSTATE classes and codes that mean "try again later": the request itself was fine. */
const UNAVAILABLE_SQLSTATE = /^(08|53|57|58)|^(55P03|40001|40P01|25P03)$/;
const UNAVAILABLE_ERRNO = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
  "ECONNABORTED",
]);
// node-postgres reports its own timeouts and lost connections as plain Errors with only a message.
const UNAVAILABLE_MESSAGE =
  /timeout exceeded when trying to connect|Connection terminated|Query read timeout|not queryable|connection timeout|Cannot use a pool after calling end/i;

/** Whether `error` says the database cannot be used right now (unreachable, overloaded, timed out, shutting down). */
export function isPostgresUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code))) return true;
  if (error instanceof AggregateError) return error.errors.some(isPostgresUnavailable);
  return UNAVAILABLE_MESSAGE.test(error.message);
}

/** PostgreSQL asks the client to run the transaction again: a serialization failure or a deadlock. */
function isRetryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "40001" || code === "40P01";
}

/** Errors of a COMMIT that went out and got no answer (see commitOutcomeUnknown). */
const commitsUnanswered = new WeakSet<object>();

/**
 * Whether `error` is a COMMIT's that reached the connection and got no answer (the connection
 * dropped, the database went away): the transaction may have committed. Everything else
 * inTransaction throws rolled it back.
 */
export function commitOutcomeUnknown(error: unknown): boolean {
  return typeof error === "object" && error !== null && commitsUnanswered.has(error);
}

/**
 * Whether `error` meets whoever comes next too: the database is unreachable, overloaded or timed out, or a lock
 * could not be had in time; not a conflict of one transaction's own (a serialization failure, a deadlock).
 */
export function isPostgresOutage(error: unknown): boolean {
  return isPostgresUnavailable(error) && !isRetryable(error);
}

export interface TransactionOptions {
  /** Further errors after which the whole transaction runs again (e.g. a unique key a concurrent writer took). */
  readonly retryIf?: (error: unknown) => boolean;
  /** Attempts in all; the last error is thrown. */
  readonly attempts?: number;
}

/**
 * Runs `work` in one READ COMMITTED transaction on one pooled connection: COMMIT when it
 * resolves, ROLLBACK when it throws. Statements `work` sends together on a pipelined connection
 * share a round trip; COMMIT waits for their answers, since they decide whether to commit. A connection that failed is discarded, not pooled again.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const attempts = options.attempts ?? 3;
  for (let attempt = 1; ; attempt += 1) {
    const client = await pool.connect();
    let broken: Error | undefined;
    // While checked out, a client whose connection ends (a reset, a failover) emits 'error', which
    // with no listener would end the process; its statements fail anyway, and it is discarded below.
    const lost = (error: Error) => (broken ??= error);
    client.on("error", lost);
    try {
      // On a pipelined connection BEGIN goes out with work's first statement, which fails too if BEGIN did.
      const begun = client.query("BEGIN");
      if (client.pipeline) begun.catch(() => undefined);
      else await begun;
      const result = await work(client);
      await begun;
      await client.query("COMMIT").catch((error: unknown) => {
        // An answer of the database's own (a deferred constraint, a serialization failure) is a rollback.
        if (isPostgresUnavailable(error) && !isRetryable(error)) commitsUnanswered.add(error as Error);
        throw error;
      });
      return result;
    } catch (error) {
      if (isPostgresUnavailable(error) && !isRetryable(error)) broken = error as Error;
      else await client.query("ROLLBACK").catch((rollbackError: Error) => (broken = rollbackError));
      if (attempt >= attempts || !(isRetryable(error) || options.retryIf?.(error))) throw error;
    } finally {
      client.off("error", lost);
      client.release(broken);
    }
  }
}
