// Wiring only: config from the environment (BILLING_PORT, LOOPGUARD_DATA_DIR, …), the ledger
// file under the data dir with the demo orders seeded, then serve until SIGTERM.
import { join } from "node:path";
import { runTool } from "@loopguard/tool-sdk";
import { systemClock } from "./clock.js";
import { DEMO_ORDERS } from "./demo-orders.js";
import { RefundLedger } from "./ledger.js";
import { build } from "./server.js";

await runTool("billing", { port: 50062, metricsPort: 9462 }, (config) => {
  const ledger = RefundLedger.open(join(config.dataDir, "billing.db"));
  ledger.seed(DEMO_ORDERS);
  return build({ ledger, clock: systemClock });
});
