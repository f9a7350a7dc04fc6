// Wiring only: a schema command (`migrate`, `wait-for-schema`, `migrations`: sql-store's
// schema-command.ts) when one is named; otherwise config from the environment (RISK_PORT,
// RISK_STORE, the customer key pepper, LOOPGUARD_DATA_DIR, …), the store it names, the server.
import { describeStoreLocation, runSchemaCommandAndExit, schemaCommandOf } from "@loopguard/sql-store";
import { ConfigError, dataDirOf, manifestDefaults, runTool } from "@loopguard/tool-sdk";
import { loadRiskConfig } from "./config.js";
import { LISTING_PEPPER, openRiskStore, riskSchema } from "./open-risk-store.js";
import { CustomerKeys, PepperMismatchError } from "./risk-store.js";
import { build } from "./server.js";

const argv = process.argv.slice(2);
const command = schemaCommandOf(argv);
if (command) {
  await runSchemaCommandAndExit({
    service: "risk",
    command,
    argv,
    load: () => {
      const { store, customerKeyPepper } = loadRiskConfig(dataDirOf());
      return { location: store, schema: riskSchema(new CustomerKeys(customerKeyPepper)) };
    },
    listing: riskSchema(new CustomerKeys(LISTING_PEPPER)),
    isConfigError: (error) => error instanceof ConfigError,
  });
}

await runTool("risk", manifestDefaults(import.meta.url), async (config, log) => {
  const { store: location, customerKeyPepper, migrateOnStart } = loadRiskConfig(config.dataDir);
  const store = await openRiskStore(location, new CustomerKeys(customerKeyPepper), {
    migrate: migrateOnStart,
    onIdleError: (error) => log.warn("risk store connection lost while idle", { error_message: error.message }),
  }).catch((error: unknown) => {
    throw error instanceof PepperMismatchError ? new ConfigError(error.message) : error;
  });
  log.info("risk store open", { store: describeStoreLocation(location), count: await store.size(), migrations_applied: store.migrationsApplied });
  const unkeyed = await store.unkeyedCount();
  if (unkeyed > 0) {
    log.warn("customers of the unpeppered layout wait to be reloaded with peppered keys (see services/risk/README.md)", { count: unkeyed });
  }
  return build({ store });
});
