// The host checks a final answer before it accepts it: every entity it cites, in the way the
// contracts say answers cite it (CitationRule), must have been observed in the session's history.
import type { CitationRule } from "@loopguard/tool-sdk";
import { itemJson } from "../api/history-json.js";
import type { HistoryItem } from "../policies/policy.js";

const AT_VERSION = /\[([A-Za-z0-9_-]+)@(\d+)\]/g;

/** Why the answer is not accepted, or undefined when it is. */
export function checkAnswer(
  answer: string,
  history: readonly HistoryItem[],
  citations: readonly CitationRule[],
): string | undefined {
  if (answer.trim().length === 0) return "the answer is empty";
  const observed = history
    .filter((h) => h.kind === "observation")
    .map(itemJson)
    .join(",");
  for (const { entity, idPrefix } of citations.filter((c) => c.idPrefix !== "")) {
    for (const id of answer.match(new RegExp(`${idPrefix}[A-Za-z0-9]+`, "g")) ?? []) {
      if (!observed.includes(id)) return `the answer cites ${entity} ${id}, which no tool returned`;
    }
  }
  const versioned = citations.filter((c) => c.atVersion).map((c) => c.entity);
  if (versioned.length === 0) return undefined;
  for (const [, id, version] of answer.matchAll(AT_VERSION)) {
    if (!versioned.some((entity) => observed.includes(`${entity}:${id}@${version}`)))
      return `the answer cites ${id}@${version}, which no tool returned`;
  }
  return undefined;
}
