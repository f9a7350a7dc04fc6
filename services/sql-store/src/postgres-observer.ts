// What a PostgreSQL pool does, told to an observer (the orchestrator's metrics): statements and
// the round trips they cost, waits for a connection, time connections spend checked out.
import type pg from "pg";

/** How many connections a pool has and how many callers wait for one. */
export interface PoolUse {
  readonly size: number;
  readonly inUse: number;
  readonly idle: number;
  readonly waiting: number;
}

export interface PoolObserver {
  /**
   * One statement sent on a pooled connection. `kind` is a named statement's name, else the SQL's
   * first word (BEGIN, COMMIT, INSERT…): a bounded set, fit for a metric label. `roundTrip`: no
   * statement was outstanding on the connection, so this one starts a round trip; one sent behind
   * another on a pipelined connection shares that one's.
   */
  readonly sent: (kind: string, roundTrip: boolean) => void;
  /** A caller got a connection after waiting `seconds` (near 0 when one was idle). */
  readonly acquired: (seconds: number) => void;
  /** A connection went back to the pool after `seconds` checked out. */
  readonly released: (seconds: number) => void;
  /** Called once with a reader of the pool's use, for gauges read when scraped. */
  readonly use: (read: () => PoolUse) => void;
}

const kindOf = (query: unknown): string => {
  if (typeof query === "object" && query !== null) {
    const { name, text } = query as { name?: unknown; text?: unknown };
    if (typeof name === "string") return name;
    query = text;
  }
  return typeof query === "string" ? (/^\s*([A-Za-z]+)/.exec(query)?.[1]?.toUpperCase() ?? "OTHER") : "OTHER";
};

/** Counts a new connection's statements, and how many are outstanding, by wrapping its query. */
function countStatements(client: pg.PoolClient, observer: PoolObserver): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  let outstanding = 0;
  const settled = () => {
    outstanding -= 1;
  };
  (client as { query: unknown }).query = (...args: unknown[]) => {
    observer.sent(kindOf(args[0]), outstanding === 0);
    outstanding += 1;
    const last = args.length - 1;
    const callback = args[last];
    if (typeof callback === "function") {
      // pool.query's form: settled before the callback, which may send the next statement.
      args[last] = (...result: unknown[]) => {
        settled();
        callback(...result);
      };
      return query(...args);
    }
    const answer = query(...args) as Promise<unknown>;
    answer.then(settled, settled);
    return answer;
  };
}

/**
 * Wraps the pool's checkout and each new connection's query: every path (pool.query, a
 * transaction's client) goes through both, so no caller has to remember to count.
 */
export function observePool(pool: pg.Pool, observer: PoolObserver): void {
  const max = pool.options.max;
  observer.use(() => ({
    size: max,
    inUse: pool.totalCount - pool.idleCount,
    idle: pool.idleCount,
    waiting: pool.waitingCount,
  }));
  const checkedOut = new WeakMap<pg.PoolClient, number>();
  pool.on("acquire", (client) => checkedOut.set(client, performance.now()));
  pool.on("release", (_error, client) => {
    const since = checkedOut.get(client);
    if (since !== undefined) observer.released((performance.now() - since) / 1000);
  });
  pool.on("connect", (client) => countStatements(client, observer));
  type Done = (error?: Error, client?: pg.PoolClient, release?: (error?: Error) => void) => void;
  const connect = pool.connect.bind(pool) as (callback?: Done) => Promise<pg.PoolClient> | undefined;
  (pool as { connect: unknown }).connect = (callback?: Done) => {
    const started = performance.now();
    const waited = () => observer.acquired((performance.now() - started) / 1000);
    if (callback === undefined)
      return connect()!.then((client) => {
        waited();
        return client;
      });
    return connect((error, client, release) => {
      if (!error) waited();
      callback(error, client, release);
    });
  };
}
