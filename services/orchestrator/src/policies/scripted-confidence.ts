// How sure the scripted policy is, from what it observed: an answer built on live results with
// documents found is sure; one from a cache, a search that could not be made, a failure that
// passed, or no document at all is less so, and says why. The figures are the policy's own
// judgement: only their order and the threshold (0.6 by default) matter — a question answered
// from nothing, or a refund decided without its policy document or the customer's risk, falls
// below it; a cached answer within its max age does not (the host serves no older one).
import { ageInWords, type HistoryItem, type ResultEnvelope } from "./policy.js";

export interface Derived {
  readonly confidence: number;
  readonly uncertaintyReason: string;
}

const SURE = 0.9;

/** The lowest of the doubts, with every doubt's reason. */
function combine(doubts: readonly (readonly [number, string])[]): Derived {
  if (doubts.length === 0) return { confidence: SURE, uncertaintyReason: "" };
  return {
    confidence: Math.min(...doubts.map(([value]) => value)),
    uncertaintyReason: doubts.map(([, why]) => why).join("; "),
  };
}

function failed(envelope: ResultEnvelope): boolean {
  return !envelope.ok && envelope.servedFrom !== "degraded";
}

/** A question's answer: `searches` as observed, `hits` the distinct documents they found. */
export function questionConfidence(searches: readonly ResultEnvelope[], hits: number): Derived {
  const down = searches.filter((s) => s.servedFrom === "degraded").length;
  const errors = searches.filter(failed).map((s) => s.error?.code ?? "ERROR");
  if (hits === 0) {
    if (down > 0)
      return { confidence: 0.1, uncertaintyReason: "the knowledge base was unavailable, so nothing was searched" };
    if (errors.length > 0)
      return { confidence: 0.1, uncertaintyReason: `the knowledge base search failed (${errors.join(", ")})` };
    return { confidence: 0.2, uncertaintyReason: "no document in the knowledge base matched" };
  }
  const doubts: [number, string][] = [];
  const ages = searches.filter((s) => s.servedFrom === "cache").map((s) => s.ageMs ?? 0);
  if (ages.length > 0)
    doubts.push([0.7, `answered from the knowledge base's cache, as of ${ageInWords(Math.max(...ages))} ago`]);
  if (down > 0) doubts.push([0.5, `${down} of ${searches.length} searches could not be made`]);
  if (errors.length > 0)
    doubts.push([0.5, `${errors.length} of ${searches.length} searches failed (${errors.join(", ")})`]);
  if (hits === 1) doubts.push([0.8, "only one document matched"]);
  return combine(doubts);
}

function last(history: readonly HistoryItem[], tool: string): ResultEnvelope | undefined {
  for (let i = history.length - 1; i >= 0; i -= 1) {
    const item = history[i]!;
    if (item.kind === "observation" && item.tool === tool) return item.envelope;
  }
  return undefined;
}

/**
 * A refund, before it is asked for and in the answer after it: how well the policy document and
 * the customer's risk were read (the host reads the order and the risk live again before the call).
 */
export function refundConfidence(history: readonly HistoryItem[], policyHits: number): Derived {
  const doubts: [number, string][] = [];
  const policy = last(history, "kb_search_search");
  if (policy?.servedFrom === "degraded")
    doubts.push([0.4, "the refund policy could not be read: the knowledge base was unavailable"]);
  else if (policy && failed(policy))
    doubts.push([0.4, `the refund policy could not be read (${policy.error?.code ?? "ERROR"})`]);
  else if (policyHits === 0) doubts.push([0.5, "no refund policy document was found"]);
  else if (policy?.servedFrom === "cache")
    doubts.push([
      0.7,
      `the refund policy came from the knowledge base's cache, as of ${ageInWords(policy.ageMs ?? 0)} ago`,
    ]);
  const risk = last(history, "risk_query_risk");
  if (risk && (risk.servedFrom === "degraded" || !risk.ok))
    doubts.push([0.4, `the customer's risk could not be read (${risk.error?.code ?? "unavailable"})`]);
  return combine(doubts);
}
