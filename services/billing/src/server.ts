// The billing tool as a ToolDefinition over injected dependencies; main.ts serves it, tests
// serve it with startTestTool.
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import type { ToolDefinition } from "@loopguard/tool-sdk";
import { type BillingDeps, createBillingHandlers, refundViolations } from "./handlers.js";

export type { BillingDeps } from "./handlers.js";
export { DEMO_ORDERS } from "./demo-orders.js";
export type { RefundLedger } from "./ledger.js";
export { openLedger } from "./open-ledger.js";

export function build(deps: BillingDeps): ToolDefinition<typeof BillingService> {
  return {
    service: BillingService,
    handlers: createBillingHandlers(deps),
    validate: { refund: refundViolations },
    close: () => deps.ledger.close(),
  };
}
