// Wiring only: a schema command (`migrate`, `wait-for-schema`, `migrations`: sql-store's
// schema-command.ts) when one is named; otherwise config from the environment (RISK_PORT,
// RISK_STORE, RISK_STORE_POOL_SIZE, RISK_SEED_DEMO, the customer key pepper, LOOPGUARD_DATA_DIR,
// …), the store it names, the server.
import { describeStoreLocation, runSchemaCommandIfNamed } from "@loopguard/sql-store";
import { ConfigError, dataDirOf, manifestDefaults, runTool } from "@loopguard/tool-sdk";
import { loadRiskConfig } from "./config.js";
import { DEMO_CUSTOMERS } from "./demo-customers.js";
import { LISTING_PEPPER, openRiskStore, riskSchema } from "./open-risk-store.js";
import { CustomerKeys, PepperMismatchError } from "./risk-store.js";
import { build } from "./server.js";

await runSchemaCommandIfNamed({
  service: "risk",
  load: () => {
    // The demo customers are seeded by a migration: the Job migrates with the pods' RISK_SEED_DEMO.
    const { store, customerKeyPepper, seedDemo } = loadRiskConfig(dataDirOf());
    return {
      location: store,
      schema: riskSchema(new CustomerKeys(customerKeyPepper), seedDemo ? DEMO_CUSTOMERS : []),
    };
  },
  listing: riskSchema(new CustomerKeys(LISTING_PEPPER)),
  isConfigError: (error) => error instanceof ConfigError,
});

await runTool("risk", manifestDefaults(import.meta.url), async (config, log) => {
  const {
    store: location,
    customerKeyPepper,
    storePoolSize,
    seedDemo,
    migrateOnStart,
  } = loadRiskConfig(config.dataDir);
  const options = {
    migrate: migrateOnStart,
    ...(storePoolSize === undefined ? {} : { maxConnections: storePoolSize }),
    onIdleError: (error: Error) => log.warn("risk store connection lost while idle", { error_message: error.message }),
  };
  const store = await openRiskStore(
    location,
    new CustomerKeys(customerKeyPepper),
    options,
    seedDemo ? DEMO_CUSTOMERS : [],
  ).catch((error: unknown) => {
    throw error instanceof PepperMismatchError ? new ConfigError(error.message) : error;
  });
  log.info("risk store open", {
    store: describeStoreLocation(location),
    count: await store.size(),
    migrations_applied: store.migrationsApplied,
    seed_demo: seedDemo,
  });
  const unkeyed = await store.unkeyedCount();
  if (unkeyed > 0) {
    log.warn(
      "customers of the unpeppered layout wait to be reloaded with peppered keys (see services/risk/README.md)",
      { count: unkeyed },
    );
  }
  return build({ store });
});
