// Bounds on everything a model writes, applied as its decision enters the host, before anything
// stores, traces or redacts it: redaction costs up to ~1 s of CPU per MB of digits
// (docs/performance.md), and a model's output is the one input the host does not choose.
import { DEFAULT_MAX_REQUEST_BYTES, personalDataSpans } from "@loopguard/tool-sdk";
import type { Decision, HistoryItem, ToolCallRequest } from "../policies/policy.js";
import type { ToolRegistry } from "../tool-registry.js";

/** A final answer is read by a person: 8 KiB is pages of text; beyond it is a runaway model. */
export const MAX_ANSWER_CHARS = 8 * 1024;
/** A rejected answer goes back to the model on every later step: its beginning says what was refused. */
export const MAX_REJECTED_ANSWER_CHARS = 2 * 1024;
/** What an EINVAL for oversized arguments quotes of them: enough for the model to know the call. */
export const ARGUMENTS_QUOTE_CHARS = 200;
/** Tool-call ids are history keys and span attributes; OpenAI's are ~30 characters of these. */
export const TOOL_CALL_ID = /^[A-Za-z0-9_-]{1,64}$/;
/** Registered tool names are OpenAI function names (≤ 64 characters): a longer one is unknown, and only its beginning is kept. */
export const MAX_TOOL_NAME_CHARS = 64;
/** Span attributes taken from the model: an id or a tool name fits; nothing larger goes to a trace backend. */
export const MAX_SPAN_ATTRIBUTE_CHARS = 64;
/**
 * Tool calls the host takes from one reply: models ask for a few in parallel; a reply of thousands
 * (a 256 KiB reply holds some 4,000) would be planned, refused and recorded one by one, each record
 * carrying the rest of the queue. The rest are dropped, and the step's record says how many.
 */
export const MAX_CALLS_PER_DECISION = 32;
/**
 * How deep a call's arguments may nest: no tool's request is more than a few levels deep, and every
 * walk of a JSON value (JSON.stringify, protobuf's decoding, redaction) recurses, so arguments nested
 * thousands deep would overflow the host's stack rather than be refused.
 */
export const MAX_ARGUMENTS_DEPTH = 64;
/** How far past a cut a number may reach: an id card spread out by 4 separators between its characters is 86 (tool-sdk pii-spread.ts). */
const CUT_MARGIN_CHARS = 96;

/**
 * The first `max` characters of `text`, cut before any piece of personal data the cut would split
 * (a partial number is one the redactor no longer recognises) and never inside a surrogate pair.
 * Only `max` + a margin of the text is read.
 */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = max;
  const spans = personalDataSpans(text.slice(0, max + CUT_MARGIN_CHARS));
  for (let i = 0; i < spans.length; i += 2) if (spans[i]! < cut && spans[i + 1]! > cut) cut = spans[i]!;
  const last = text.charCodeAt(cut - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? cut - 1 : cut);
}

/** `text` within `max` characters, with a note saying how much the host cut. */
export function boundText(text: string, max: number): string {
  const kept = cutText(text, max);
  return kept.length === text.length ? text : `${kept}… [the host cut ${text.length - kept.length} more characters]`;
}

/**
 * The decision within the host's bounds: its answer cut, at most MAX_CALLS_PER_DECISION calls, each
 * call's id, name and arguments bounded.
 */
export function boundDecision(
  decision: Decision,
  registry: ToolRegistry,
  history: readonly HistoryItem[],
  step: number,
): Decision {
  if (decision.kind === "final")
    return decision.answer.length <= MAX_ANSWER_CHARS
      ? decision
      : { ...decision, answer: boundText(decision.answer, MAX_ANSWER_CHARS) };
  const taken = new Set<string>();
  for (const item of history) if (item.kind !== "rejected_answer") taken.add(item.callId);
  return {
    ...decision,
    calls: decision.calls
      .slice(0, MAX_CALLS_PER_DECISION)
      .map((call, index) => boundCall(call, registry, taken, `call_${step}_${index}`)),
  };
}

function boundCall(call: ToolCallRequest, registry: ToolRegistry, taken: Set<string>, hostId: string): ToolCallRequest {
  let id = call.id;
  // An id the model wrote goes back to it, into traces and spans: one holding personal data is replaced too.
  if (!TOOL_CALL_ID.test(id) || taken.has(id) || personalDataSpans(id).length > 0) {
    id = hostId;
    for (let n = 2; taken.has(id); n += 1) id = `${hostId}_${n}`;
  }
  taken.add(id);
  const name = call.name.length > MAX_TOOL_NAME_CHARS ? `${cutText(call.name, MAX_TOOL_NAME_CHARS)}…` : call.name;
  const limit = registry.get(name)?.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES;
  // A UTF-8 character is at most 3 bytes per UTF-16 unit: most calls are known small without counting.
  const bytes = call.arguments.length * 3 <= limit ? 0 : Buffer.byteLength(call.arguments);
  if (bytes <= limit) return id === call.id && name === call.name ? call : { id, name, arguments: call.arguments };
  return { id, name, arguments: cutText(call.arguments, ARGUMENTS_QUOTE_CHARS), argumentsBytes: bytes };
}

/** Whether JSON `text` nests arrays and objects deeper than `max`, read without parsing it (brackets inside strings do not count). */
export function nestedDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * The JSON text of arguments a server sent as a parsed value. Past MAX_ARGUMENTS_DEPTH the value is
 * written only down to one level deeper (each container there as `[]`): the text is still too deep,
 * so the host refuses it for its depth, and JSON.stringify never recurses further.
 */
export function argumentsText(value: unknown): string {
  const cut = new Set<object>();
  let level: unknown[] = [value];
  for (let depth = 1; level.length > 0; depth++) {
    const next: unknown[] = [];
    for (const item of level) {
      if (typeof item !== "object" || item === null) continue;
      if (depth > MAX_ARGUMENTS_DEPTH) cut.add(item);
      else for (const child of Object.values(item)) next.push(child);
    }
    level = next;
  }
  if (cut.size === 0) return JSON.stringify(value);
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === "object" && v !== null && cut.has(v) ? [] : v));
}
