// The PostgreSQL store's round trips and connection pool, in the orchestrator's registry: what a
// deployment reads to size each replica's pool and the database's max_connections.
import type { PoolObserver, PoolUse } from "@loopguard/sql-store";
import { declareIn } from "@loopguard/tool-sdk";
import { Gauge, type Registry } from "prom-client";

/** Waits for a pooled connection: an idle one takes microseconds, a new one a connect (milliseconds). */
const WAIT_BUCKETS = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export function storePoolMetrics(registry: Registry): PoolObserver {
  const declare = declareIn(registry);
  const statements = declare.counter(
    "loopguard_store_statements_total",
    "Statements the session store sent to PostgreSQL, by statement (a named statement, else the SQL's first word).",
    ["statement"],
  );
  const roundTrips = declare.counter(
    "loopguard_store_round_trips_total",
    "Round trips the session store waited for PostgreSQL: statements sent behind an unanswered one on the same connection share its round trip.",
  );
  const wait = declare.histogram(
    "loopguard_store_pool_wait_seconds",
    "How long each store operation waited for a pooled PostgreSQL connection; the sum's rate is the mean number of operations waiting.",
    WAIT_BUCKETS,
  );
  const busy = declare.counter(
    "loopguard_store_pool_busy_seconds_total",
    "Seconds pooled PostgreSQL connections spent checked out; its rate is the mean number of connections in use.",
  );
  let read: (() => PoolUse) | undefined;
  const registers = [registry];
  new Gauge({
    name: "loopguard_store_pool_connections",
    help: "PostgreSQL connections of the session store's pool, by state (in_use, idle, max: the pool's size).",
    labelNames: ["state"] as const,
    registers,
    collect() {
      if (!read) return;
      const use = read();
      this.set({ state: "in_use" }, use.inUse);
      this.set({ state: "idle" }, use.idle);
      this.set({ state: "max" }, use.size);
    },
  });
  new Gauge({
    name: "loopguard_store_pool_waiting",
    help: "Session store operations waiting for a pooled PostgreSQL connection.",
    registers,
    collect() {
      if (read) this.set(read().waiting);
    },
  });
  // One child per statement, looked up once: the counter is bumped on every round trip.
  const children = new Map<string, ReturnType<typeof statements.labels>>();
  return {
    sent: (kind, roundTrip) => {
      const child = children.get(kind) ?? statements.labels(kind);
      children.set(kind, child);
      child.inc();
      if (roundTrip) roundTrips.inc();
    },
    acquired: (seconds) => wait.observe(seconds),
    released: (seconds) => busy.inc(seconds),
    use: (reader) => {
      read = reader;
    },
  };
}
