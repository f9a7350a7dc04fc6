// The risk tool as a ToolDefinition over its store; main.ts serves it, tests start it in-process.
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import type { ToolDefinition } from "@loopguard/tool-sdk";
import { createRiskHandlers, type RiskHandlerDeps } from "./handlers.js";
import { normaliseQueryRisk, queryRiskViolations } from "./identity.js";

export { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";
export { BACKEND_DOWN_RETRY_AFTER_MS } from "./handlers.js";
export { openRiskStore } from "./open-risk-store.js";
export { CustomerKeys, type RiskStore } from "./risk-store.js";

export function build(deps: RiskHandlerDeps): ToolDefinition<typeof RiskService> {
  return {
    service: RiskService,
    handlers: createRiskHandlers(deps),
    normalise: { queryRisk: normaliseQueryRisk },
    validate: { queryRisk: queryRiskViolations },
    close: () => deps.store.close(),
  };
}
