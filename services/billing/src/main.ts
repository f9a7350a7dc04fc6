// Wiring only: a schema command (`migrate`, `wait-for-schema`, `migrations`: sql-store's
// schema-command.ts) when one is named; otherwise config from the environment (BILLING_PORT,
// BILLING_STORE, BILLING_STORE_POOL_SIZE, BILLING_SEED_DEMO, LOOPGUARD_DATA_DIR, …), the ledger it
// names with the demo orders seeded unless BILLING_SEED_DEMO=false (production), then serve until
// SIGTERM.
import { describeStoreLocation, runSchemaCommandIfNamed } from "@loopguard/sql-store";
import { ConfigError, dataDirOf, manifestDefaults, runTool } from "@loopguard/tool-sdk";
import { systemClock } from "./clock.js";
import { loadBillingConfig } from "./config.js";
import { DEMO_ORDERS } from "./demo-orders.js";
import { LEDGER_SCHEMA, openLedger } from "./open-ledger.js";
import { build } from "./server.js";

await runSchemaCommandIfNamed({
  service: "billing",
  load: () => ({ location: loadBillingConfig(dataDirOf()).store, schema: LEDGER_SCHEMA }),
  listing: LEDGER_SCHEMA,
  isConfigError: (error) => error instanceof ConfigError,
});

await runTool("billing", manifestDefaults(import.meta.url), async (config, log) => {
  const { store, storePoolSize, seedDemo, migrateOnStart, lockTimeoutMs } = loadBillingConfig(config.dataDir);
  const ledger = await openLedger(store, {
    migrate: migrateOnStart,
    ...(storePoolSize === undefined ? {} : { maxConnections: storePoolSize }),
    ...(lockTimeoutMs === undefined ? {} : { lockTimeoutMs }),
    onIdleError: (error) => log.warn("ledger connection lost while idle", { error_message: error.message }),
  });
  if (seedDemo) await ledger.seed(DEMO_ORDERS);
  log.info("ledger open", {
    store: describeStoreLocation(store),
    seed_demo: seedDemo,
    migrations_applied: ledger.migrationsApplied,
  });
  return build({ ledger, clock: systemClock });
});
