// Billing's own settings, read once from the environment; the common ones (ports, data folder,
// auth) come from the tool-sdk. A bad value is a ConfigError: exit 2 before anything binds.
import { join } from "node:path";
import { MAX_STORE_POOL_SIZE, parseStoreUrl, type StoreLocation } from "@loopguard/sql-store";
import { booleanSetting, ConfigError, optionalIntegerSetting, secretSetting } from "@loopguard/tool-sdk";

export interface BillingConfig {
  /** BILLING_STORE (or the file BILLING_STORE_FILE names): `sqlite:<file>` (default `<data dir>/billing.db`) or `postgres://…` for several replicas. */
  readonly store: StoreLocation;
  /** BILLING_STORE_POOL_SIZE: PostgreSQL connections per replica (the ledger's default when unset). */
  readonly storePoolSize: number | undefined;
  /** BILLING_SEED_DEMO: whether the demo orders are seeded at start ("false" in production). */
  readonly seedDemo: boolean;
  /** BILLING_MIGRATE_ON_START: apply pending migrations when serving starts (one local process), or only check the schema (pods). */
  readonly migrateOnStart: boolean;
  /**
   * BILLING_LOCK_TIMEOUT_MS: how long a refund waits for the ledger's lock (SQLite's write lock,
   * PostgreSQL's lock_timeout) before LEDGER_UNAVAILABLE; under Refund's 2 s SLA (default 1000).
   */
  readonly lockTimeoutMs: number | undefined;
}

export function loadBillingConfig(
  dataDir: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): BillingConfig {
  const url = secretSetting(env, "BILLING_STORE");
  return Object.freeze({
    store: parseStoreUrl(
      url?.value ?? `sqlite:${join(dataDir, "billing.db")}`,
      url?.variable ?? "BILLING_STORE",
      ConfigError,
    ),
    storePoolSize: optionalIntegerSetting(env, "BILLING_STORE_POOL_SIZE", { min: 1, max: MAX_STORE_POOL_SIZE }),
    seedDemo: booleanSetting(env, "BILLING_SEED_DEMO", true),
    migrateOnStart: booleanSetting(env, "BILLING_MIGRATE_ON_START", true),
    lockTimeoutMs: optionalIntegerSetting(env, "BILLING_LOCK_TIMEOUT_MS", { min: 1, max: 1900 }),
  });
}
