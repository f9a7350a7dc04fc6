// What the API serves of a session (GetSession, ListSessions, WatchSession, GetTrace, the dashboard)
// hides what the policy's view hides (modelView): redacted as every record is, and the task's own
// phone and id card numbers masked however they are written ("138*0013*8000"), found by their
// digits in order, which only the task can tell. Where the model sees a placeholder, a caller sees
// REDACTED. Step records get the same masking as they are written (trace-sink.ts), so the trace
// file, the store and the OTLP logs never hold those numbers either.
import { REDACTED, redactText } from "@loopguard/tool-sdk";
import type { JsonObject, JsonValue } from "../store/session-store.js";
import { canonicalOf, ownValues } from "./personal-data.js";
import { redact } from "./redact.js";

type Mask = (text: string) => string;

export interface ServedView {
  /** Text already redacted when it was stored (an answer, a reason): the task's own numbers masked too. */
  readonly stored: Mask;
  /** Text as a caller wrote it (the goal): redacted, and the task's own numbers masked. */
  readonly text: Mask;
  /** A value as a caller wrote it (the task, a call's arguments): redacted, keys included, and the task's own numbers masked. */
  readonly value: <T extends JsonValue>(value: T) => T;
  /** A value already redacted when it was stored (a step record): the task's own numbers masked in its text and keys. */
  readonly storedValue: <T extends JsonValue>(value: T) => T;
}

/** The fewest digits a number of the task is written with: a mobile's 11 national digits. */
const FEWEST_DIGITS = 11;

/** Whether `text` holds at least FEWEST_DIGITS digits, ASCII or full width: the rest cannot hold a number of the task. */
function mayHoldNumber(text: string): boolean {
  if (text.length < FEWEST_DIGITS) return false;
  let digits = 0;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (((c >= 0x30 && c <= 0x39) || (c >= 0xff10 && c <= 0xff19)) && ++digits === FEWEST_DIGITS) return true;
  }
  return false;
}

/** Every value of the task that is one piece of personal data, by canonical form, each to be shown as REDACTED. */
function ownNumbers(value: JsonValue, found: Map<string, string>): Map<string, string> {
  if (value !== null && typeof value === "object") {
    for (const child of Object.values(value)) ownNumbers(child, found);
    return found;
  }
  const canonical = canonicalOf(value);
  if (canonical !== undefined) found.set(canonical, REDACTED);
  return found;
}

/** The mask of each task's own numbers, made once per task object: a run writes every step of its session with one. */
const owns = new WeakMap<JsonObject, Mask>();

function ownMask(task: JsonObject): Mask {
  let own = owns.get(task);
  if (!own) {
    own = ownValues(ownNumbers(task, new Map()));
    owns.set(task, own);
  }
  return own;
}

/**
 * `value` with each string masked by `text` and each key by `key`; what no mask changed is returned
 * as it is, not copied: a step record's text seldom holds a number of the task, and copying every
 * record would cost each step more than the masking itself.
 */
function maskValue(value: JsonValue, text: Mask, key: Mask): JsonValue {
  if (typeof value === "string") return text(value);
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    const children = value.map((child) => maskValue(child, text, key));
    return children.some((child, i) => child !== value[i]) ? children : value;
  }
  const entries = Object.entries(value);
  const shown = entries.map(([name, child]) => [key(name), maskValue(child, text, key)] as const);
  if (shown.every(([name, child], i) => name === entries[i]![0] && child === entries[i]![1])) return value;
  const out: JsonObject = {};
  for (const [name, child] of shown)
    Object.defineProperty(out, name, { value: child, enumerable: true, writable: true, configurable: true });
  return out;
}

/** The served view of a session on `task`; the task's numbers are looked for only if some text may hold one. */
export function servedView(task: JsonObject): ServedView {
  const stored: Mask = (text) => (mayHoldNumber(text) ? ownMask(task)(text) : text);
  const text: Mask = (t) => stored(redactText(t));
  return {
    stored,
    text,
    value: (value) => maskValue(redact(value), stored, text) as typeof value,
    storedValue: (value) => maskValue(value, stored, stored) as typeof value,
  };
}
