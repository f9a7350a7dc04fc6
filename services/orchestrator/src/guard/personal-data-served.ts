// What the API serves of a session (GetSession, ListSessions, WatchSession, the dashboard) hides
// what the policy's view hides (modelView): redacted as every record is, and the task's own phone
// and id card numbers masked however they are written ("138*0013*8000"), found by their digits in
// order, which only the task can tell. Where the model sees a placeholder, a caller sees REDACTED.
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

/** The served view of a session on `task`; the task's numbers are looked for once, and only if some text may hold one. */
export function servedView(task: JsonObject): ServedView {
  let own: Mask | undefined;
  const stored: Mask = (text) => {
    if (!mayHoldNumber(text)) return text;
    own ??= ownValues(ownNumbers(task, new Map()));
    return own(text);
  };
  const text: Mask = (t) => stored(redactText(t));
  const masked = (value: JsonValue): JsonValue => {
    if (typeof value === "string") return stored(value);
    if (value === null || typeof value !== "object") return value;
    if (Array.isArray(value)) return value.map(masked);
    const out: JsonObject = {};
    for (const [key, child] of Object.entries(value))
      Object.defineProperty(out, text(key), {
        value: masked(child),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    return out;
  };
  return { stored, text, value: (value) => masked(redact(value)) as typeof value };
}
