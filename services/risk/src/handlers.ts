// QueryRisk: look a customer up by canonical id card and E.164 mobile; GetCustomerRisk: by the
// customer id an order names. Requests have already passed auth, normalisation
// (normaliseQueryRisk) and the contract's field rules; what is left here are the rules the
// contract cannot express, and the store.
import type { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import {
  type CallContext,
  cnMobileToE164,
  parseIdCard,
  status,
  ToolError,
  type ToolHandlers,
} from "@loopguard/tool-sdk";
import { type RiskStore, RiskStoreUnavailableError } from "./risk-store.js";

/** How long callers are told to wait when the store is down: long enough for a restart. */
export const BACKEND_DOWN_RETRY_AFTER_MS = 30_000;

export interface RiskHandlerDeps {
  readonly store: RiskStore;
}

export function createRiskHandlers({ store }: RiskHandlerDeps): ToolHandlers<typeof RiskService> {
  return {
    async queryRisk(request, ctx) {
      const idCard = parseIdCard(request.idCard) ?? refuseField("id_card");
      const phone = cnMobileToE164(request.phone) ?? refuseField("phone");
      const risk = await read(() => store.find(idCard, phone), ctx);
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

/**
 * The field rules the contract cannot express, each refused with its own reason. Messages name the
 * field, never its value: callers and logs must not see the id card or phone.
 */
const FIELD_REFUSALS = {
  id_card: {
    reason: "INVALID_ID_CARD_FORMAT",
    message: "id_card is not a valid GB 11643 number",
    description: "birth date or check character is not valid under GB 11643",
    rule: "id_card.gb11643",
  },
  phone: {
    reason: "INVALID_PHONE_FORMAT",
    message: "phone is not a mainland China mobile number",
    description: "must be a mainland China mobile number",
    rule: "phone.cn_mobile",
  },
} as const;

function refuseField(field: keyof typeof FIELD_REFUSALS): never {
  const { reason, message, description, rule } = FIELD_REFUSALS[field];
  throw new ToolError(status.INVALID_ARGUMENT, reason, message, {
    fieldViolations: [{ field, description, reason: rule }],
  });
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
