// The host checks a final answer before it accepts it: every refund id and document it cites must
// have been observed in the session's history.
import { itemJson } from "../api/history-json.js";
import type { HistoryItem } from "../policies/policy.js";

const REFUND_ID = /rf_[A-Za-z0-9]{16}/g;
const DOC_CITATION = /\[([a-z0-9-]+)@(\d+)\]/g;

/** Why the answer is not accepted, or undefined when it is. */
export function checkAnswer(answer: string, history: readonly HistoryItem[]): string | undefined {
  if (answer.trim().length === 0) return "the answer is empty";
  const observed = history
    .filter((h) => h.kind === "observation")
    .map(itemJson)
    .join(",");
  for (const refundId of answer.match(REFUND_ID) ?? []) {
    if (!observed.includes(refundId)) return `the answer cites refund ${refundId}, which no tool returned`;
  }
  for (const [, id, version] of answer.matchAll(DOC_CITATION)) {
    if (!observed.includes(`kb:${id}@${version}`)) return `the answer cites ${id}@${version}, which no search returned`;
  }
  return undefined;
}
