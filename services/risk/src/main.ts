// Wiring only: config from the environment (RISK_PORT, RISK_METRICS_PORT, LOOPGUARD_DATA_DIR, …),
// the store under the data folder, the server.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { runTool } from "@loopguard/tool-sdk";
import { build, RiskStore } from "./server.js";

await runTool("risk", { port: 50063, metricsPort: 9463 }, (config, log) => {
  mkdirSync(config.dataDir, { recursive: true });
  const store = RiskStore.open(join(config.dataDir, "risk.db"));
  log.info("risk store open", { data_dir: config.dataDir, count: store.size() });
  return build({ store });
});
