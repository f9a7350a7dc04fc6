// Wiring only: config from the environment (RISK_PORT, RISK_STORE, the customer key pepper,
// LOOPGUARD_DATA_DIR, …), the store it names, the server.
import { describeStoreLocation } from "@loopguard/sql-store";
import { ConfigError, manifestDefaults, runTool } from "@loopguard/tool-sdk";
import { loadRiskConfig } from "./config.js";
import { openRiskStore } from "./open-risk-store.js";
import { CustomerKeys, PepperMismatchError } from "./risk-store.js";
import { build } from "./server.js";

await runTool("risk", manifestDefaults(import.meta.url), async (config, log) => {
  const { store: location, customerKeyPepper } = loadRiskConfig(config.dataDir);
  const store = await openRiskStore(location, new CustomerKeys(customerKeyPepper), {
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
