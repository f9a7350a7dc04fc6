// QueryRisk: look a customer up by canonical id card and E.164 mobile; GetCustomerRisk: by the
// customer id an order names. Requests have already passed auth, normalisation
// (normaliseQueryRisk), the contract's field rules and the ones it cannot express
// (queryRiskViolations, identity.ts); what is left here is the store.
import type { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { type CallContext, status, ToolError, type ToolHandlers } from "@loopguard/tool-sdk";
import { type RiskStore, RiskStoreUnavailableError } from "./risk-store.js";

/** How long callers are told to wait when the store is down: long enough for a restart. */
export const BACKEND_DOWN_RETRY_AFTER_MS = 30_000;

export interface RiskHandlerDeps {
  readonly store: RiskStore;
}

export function createRiskHandlers({ store }: RiskHandlerDeps): ToolHandlers<typeof RiskService> {
  return {
    async queryRisk(request, ctx) {
      const risk = await read(() => store.find(request.idCard, request.phone), ctx);
      if (!risk) throw new ToolError(status.NOT_FOUND, "USER_NOT_FOUND", "no customer has this id card and phone");
      return { riskScore: risk.riskScore, reason: risk.reason, factors: risk.factors };
    },
    async getCustomerRisk(request, ctx) {
      const risk = await read(() => store.findByCustomerId(request.customerId), ctx);
      if (!risk) throw new ToolError(status.NOT_FOUND, "USER_NOT_FOUND", "no customer has this customer id");
      return { riskScore: risk.riskScore, reason: risk.reason, factors: risk.factors };
    },
  };
}

/** A store read; a store that cannot answer is BACKEND_DOWN, to be retried after a while. */
async function read<T>(work: () => Promise<T>, ctx: CallContext): Promise<T> {
  try {
    return await work();
  } catch (cause) {
    if (!(cause instanceof RiskStoreUnavailableError)) throw cause;
    ctx.log.warn("risk store unavailable", { error_message: cause.message });
    throw new ToolError(status.UNAVAILABLE, "BACKEND_DOWN", "the risk backend is down", {
      retryAfterMs: BACKEND_DOWN_RETRY_AFTER_MS,
      cause,
    });
  }
}
