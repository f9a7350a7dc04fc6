// The host checks a final answer before it accepts it: every entity it cites, in the way the
// contracts say answers cite it (CitationRule), must have been returned by a tool in the session's
// history. What counts as returned is the data and the world refs of answers that succeeded, never
// an error's or a note's words: those may quote the model's own (an unknown tool's name, its
// arguments), and an id the model made up must not become citable by being refused once. Ids are
// compared whole, so a cited id cut short of one that was returned is not taken for it.
import type { CitationRule } from "@loopguard/tool-sdk";
import { itemJson } from "../api/history-json.js";
import type { HistoryItem } from "../policies/policy.js";

const AT_VERSION = /\[([A-Za-z0-9_-]+)@(\d+)\]/g;
/** A world ref at a version, as tools return it: "<entity>:<id>@<version>". */
const REF_AT_VERSION = /([A-Za-z0-9_-]+):([A-Za-z0-9_-]+)@(\d+)/g;

/** The text of what tools returned: the data and refs of the observations that succeeded. */
function returnedText(history: readonly HistoryItem[]): string {
  return history
    .flatMap((h) =>
      h.kind === "observation" && h.envelope.ok ? [itemJson(h.envelope.data ?? null), ...h.envelope.refs] : [],
    )
    .join(",");
}

/** Why the answer is not accepted, or undefined when it is. */
export function checkAnswer(
  answer: string,
  history: readonly HistoryItem[],
  citations: readonly CitationRule[],
): string | undefined {
  if (answer.trim().length === 0) return "the answer is empty";
  const returned = returnedText(history);
  for (const { entity, idPrefix } of citations.filter((c) => c.idPrefix !== "")) {
    const id = new RegExp(`${idPrefix}[A-Za-z0-9]+`, "g");
    const ids = new Set(returned.match(id));
    for (const cited of answer.match(id) ?? [])
      if (!ids.has(cited)) return `the answer cites ${entity} ${cited}, which no tool returned`;
  }
  const versioned = new Set(citations.filter((c) => c.atVersion).map((c) => c.entity));
  if (versioned.size === 0) return undefined;
  const refs = new Set(
    [...returned.matchAll(REF_AT_VERSION)].flatMap(([, entity, id, version]) =>
      versioned.has(entity!) ? [`${id}@${version}`] : [],
    ),
  );
  for (const [, id, version] of answer.matchAll(AT_VERSION)) {
    if (!refs.has(`${id}@${version}`)) return `the answer cites ${id}@${version}, which no tool returned`;
  }
  return undefined;
}
