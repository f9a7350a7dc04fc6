// Personal data never reaches traces, step records or stored history: values under sensitive
// keys are replaced, and id card numbers and CN mobile numbers inside any string are masked.
// Applied before anything is written.
import type { JsonValue } from "./session-store.js";

const SENSITIVE_KEYS = new Set(["idcard", "id_card", "phone", "token", "authorization", "apikey", "api_key", "secret", "password"]);
// 18-character resident id numbers (17 digits + digit/X) and mainland mobiles (+86 optional),
// each standing alone: a run of digits inside a longer token of letters and digits (a trace id,
// a hash) is part of that token, not a number, and masking it would break the token.
const ID_CARD = /(?<![0-9A-Za-z])[0-9]{17}[0-9Xx](?![0-9A-Za-z])/g;
const CN_MOBILE = /(?<![0-9A-Za-z])(?:\+?86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}(?![0-9A-Za-z])/g;
export const MASK = "[redacted]";

/**
 * Objects and arrays that redact() returned. Records are never mutated once built, so one that
 * is part of a larger value (an observation inside a step record) is not scanned a second time.
 */
const redacted = new WeakSet<object>();

/** Three digits in a row: every id card and mobile number has them, most text has none. */
const MAY_HOLD_NUMBER = /[0-9]{3}/;

export function redactText(text: string): string {
  if (!MAY_HOLD_NUMBER.test(text)) return text;
  return text.replace(ID_CARD, MASK).replace(CN_MOBILE, MASK);
}

export function redact<T extends JsonValue | undefined>(value: T): T {
  const out = redactValue(value, "");
  if (out !== null && typeof out === "object") redacted.add(out);
  return out;
}

function redactValue<T extends JsonValue | undefined>(value: T, key: string): T {
  if (key && SENSITIVE_KEYS.has(key.toLowerCase())) return (value === undefined ? value : MASK) as T;
  if (typeof value === "string") return redactText(value) as T;
  if (value === null || typeof value !== "object" || redacted.has(value)) return value;
  if (Array.isArray(value)) return value.map((v) => redactValue(v, "")) as T;
  // A loop, not Object.fromEntries(Object.entries(…).map(…)): no pair arrays to allocate on every
  // step. defineProperty keeps an own "__proto__" key a plain key, as fromEntries does.
  const out: Record<string, JsonValue> = {};
  for (const k of Object.keys(value)) {
    const v = redactValue((value as Record<string, JsonValue>)[k], k) as JsonValue;
    if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out as T;
}
