// Who a risk query is about, brought to one canonical form before the contract is checked, so
// that the same person typed three ways is one customer. What an id card or a CN mobile is lives
// in tool-sdk (pii.ts), shared with every redactor. No gRPC in here.
import type { QueryRiskRequest } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { cnMobileToE164, normaliseIdCard } from "@loopguard/tool-sdk";

/**
 * Rewrites a QueryRisk request into its canonical form before the contract is checked:
 * a lower-case x check character becomes X, a CN mobile becomes E.164. Anything it does not
 * recognise is left as it came, so that validation reports every malformed field at once.
 */
export function normaliseQueryRisk(request: QueryRiskRequest): void {
  request.idCard = normaliseIdCard(request.idCard);
  request.phone = cnMobileToE164(request.phone) ?? request.phone;
}
