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

/** The mask of each task's own numbers, made once per task object (a run writes every step of its session with one); null for a task with none. */
const owns = new WeakMap<JsonObject, Mask | null>();

function ownMask(task: JsonObject): Mask | null {
  let own = owns.get(task);
  if (own === undefined) {
    const numbers = ownNumbers(task, new Map());
    own = numbers.size > 0 ? ownValues(numbers) : null;
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
    let out: JsonValue[] | undefined;
    for (let i = 0; i < value.length; i += 1) {
      const child = maskValue(value[i]!, text, key);
      if (child === value[i]) continue;
      out ??= [...value];
      out[i] = child;
    }
    return out ?? value;
  }
  const names = Object.keys(value);
  for (let i = 0; i < names.length; i += 1) {
    const name = names[i]!;
    const masked = maskValue(value[name]!, text, key);
    if (masked !== value[name] || key(name) !== name) return maskedCopy(value, names, i, masked, text, key);
  }
  return value;
}

/** A copy of `value` whose first change is at key `names[from]` (to `first`): the keys before it kept, the rest masked. */
function maskedCopy(
  value: JsonObject,
  names: string[],
  from: number,
  first: JsonValue,
  text: Mask,
  key: Mask,
): JsonObject {
  const out: JsonObject = {};
  names.forEach((name, i) => {
    const child = i < from ? value[name]! : i === from ? first : maskValue(value[name]!, text, key);
    Object.defineProperty(out, i < from ? name : key(name), {
      value: child,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  });
  return out;
}

/** The served view of a session on `task`; the task's numbers are looked for only if some text may hold one. */
export function servedView(task: JsonObject): ServedView {
  const stored: Mask = (text) => (mayHoldNumber(text) ? (ownMask(task)?.(text) ?? text) : text);
  const text: Mask = (t) => stored(redactText(t));
  return {
    stored,
    text,
    value: (value) => maskValue(redact(value), stored, text) as typeof value,
    // A task with no number of its own has nothing to mask in what was stored redacted: no walk.
    storedValue: (value) => (ownMask(task) ? (maskValue(value, stored, stored) as typeof value) : value),
  };
}
