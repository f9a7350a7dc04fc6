// Risk's own settings, read once from the environment; the common ones (ports, data folder, auth)
// come from the tool-sdk. A bad or missing value is a ConfigError: exit 2 before anything binds.
import { join } from "node:path";
import { MAX_STORE_POOL_SIZE, parseStoreUrl, type StoreLocation } from "@loopguard/sql-store";
import { booleanSetting, ConfigError, optionalIntegerSetting, secretSetting } from "@loopguard/tool-sdk";
import { MIN_PEPPER_LENGTH } from "./risk-store.js";

type Env = Readonly<Record<string, string | undefined>>;

export interface RiskConfig {
  /** RISK_STORE (or the file RISK_STORE_FILE names): `sqlite:<file>` (default `<data dir>/risk.db`) or `postgres://…` for several replicas. */
  readonly store: StoreLocation;
  /** The secret customer keys are HMAC'd with; never logged. */
  readonly customerKeyPepper: string;
  /** RISK_STORE_POOL_SIZE: PostgreSQL connections per replica (the store's default when unset). */
  readonly storePoolSize: number | undefined;
  /** RISK_SEED_DEMO: whether a new store gets the demo customers ("false" in production). */
  readonly seedDemo: boolean;
  /** RISK_MIGRATE_ON_START: apply pending migrations when serving starts (one local process), or only check the schema (pods). */
  readonly migrateOnStart: boolean;
}

/** RISK_CUSTOMER_KEY_PEPPER_FILE names a file holding the pepper; RISK_CUSTOMER_KEY_PEPPER holds it inline. */
function readPepper(env: Env): string {
  const pepper = secretSetting(env, "RISK_CUSTOMER_KEY_PEPPER")?.value ?? "";
  if (pepper.length < MIN_PEPPER_LENGTH) {
    throw new ConfigError(
      `set RISK_CUSTOMER_KEY_PEPPER_FILE (or RISK_CUSTOMER_KEY_PEPPER) to a secret of at least ${MIN_PEPPER_LENGTH} characters; \`pnpm start\` makes one under .data/`,
    );
  }
  return pepper;
}

export function loadRiskConfig(dataDir: string, env: Env = process.env): RiskConfig {
  const url = secretSetting(env, "RISK_STORE");
  return Object.freeze({
    store: parseStoreUrl(
      url?.value ?? `sqlite:${join(dataDir, "risk.db")}`,
      url?.variable ?? "RISK_STORE",
      ConfigError,
    ),
    customerKeyPepper: readPepper(env),
    storePoolSize: optionalIntegerSetting(env, "RISK_STORE_POOL_SIZE", { min: 1, max: MAX_STORE_POOL_SIZE }),
    seedDemo: booleanSetting(env, "RISK_SEED_DEMO", true),
    migrateOnStart: booleanSetting(env, "RISK_MIGRATE_ON_START", true),
  });
}
