// Who a risk query is about, brought to one canonical form before the contract is checked, so
// that the same person typed three ways is one customer, and the rules of it the contract cannot
// express. What an id card or a CN mobile is lives in tool-sdk (pii.ts), shared with every
// redactor. No gRPC in here.
import type { QueryRiskRequest } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { cnMobileToE164, normaliseIdCard, parseIdCard, type RuleViolation } from "@loopguard/tool-sdk";

/**
 * Rewrites a QueryRisk request into its canonical form before the contract is checked:
 * a lower-case x check character becomes X, a CN mobile becomes E.164. Anything it does not
 * recognise is left as it came, so that validation reports every malformed field at once.
 */
export function normaliseQueryRisk(request: QueryRiskRequest): void {
  request.idCard = normaliseIdCard(request.idCard);
  request.phone = cnMobileToE164(request.phone) ?? request.phone;
}

/**
 * The rules the contract cannot express, each with its own reason when it alone is broken. They
 * name the field, never its value: callers and logs must not see the id card or phone.
 */
const ID_CARD_RULE: RuleViolation = {
  field: "id_card",
  description: "birth date or check character is not valid under GB 11643",
  reason: "id_card.gb11643",
  errorReason: "INVALID_ID_CARD_FORMAT",
};
const PHONE_RULE: RuleViolation = {
  field: "phone",
  description: "must be a mainland China mobile number",
  reason: "phone.cn_mobile",
  errorReason: "INVALID_PHONE_FORMAT",
};

/** QueryRisk's `validate` hook: run beside the contract's rules on the normalised request, so every broken field is named. */
export function queryRiskViolations(request: QueryRiskRequest): RuleViolation[] {
  return [
    ...(parseIdCard(request.idCard) === undefined ? [ID_CARD_RULE] : []),
    ...(cnMobileToE164(request.phone) === undefined ? [PHONE_RULE] : []),
  ];
}
