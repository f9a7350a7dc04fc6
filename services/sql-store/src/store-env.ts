// The two settings every stateful service reads the same way beside its store URL, so a
// deployment renders them once for all (deploy/src/postgres-budget.ts):
// - <PREFIX>_STORE_POOL_SIZE: PostgreSQL connections one replica's pool may hold (its share of the
//   database's max_connections; the store's default when unset);
// - <PREFIX>_SEED_DEMO: "true" (the default, for local runs and the README's demo) or "false",
//   which production renders so no demo rows ever reach a real ledger or risk table.

type Env = Readonly<Record<string, string | undefined>>;

/** The largest pool a replica may ask for: more would only queue inside PostgreSQL. */
export const MAX_STORE_POOL_SIZE = 100;

/** `<prefix>_STORE_POOL_SIZE` as a number, or undefined when unset. */
export function storePoolSize(
  env: Env,
  prefix: string,
  errorType: new (message: string) => Error = Error,
): number | undefined {
  const name = `${prefix}_STORE_POOL_SIZE`;
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1 || value > MAX_STORE_POOL_SIZE)
    throw new errorType(`${name} must be an integer in 1..${MAX_STORE_POOL_SIZE}, got "${raw}"`);
  return value;
}

/** `<prefix>_SEED_DEMO`: whether the store may be seeded with demo rows (true when unset). */
export function seedDemo(env: Env, prefix: string, errorType: new (message: string) => Error = Error): boolean {
  const name = `${prefix}_SEED_DEMO`;
  const raw = env[name];
  if (raw === undefined || raw === "" || raw === "true") return true;
  if (raw === "false") return false;
  throw new errorType(`${name} must be "true" or "false", got "${raw}"`);
}
