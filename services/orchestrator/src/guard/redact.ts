// Personal data never reaches traces, step records or stored history: values under sensitive
// keys are replaced, and id card numbers and CN mobile numbers inside any string (in every way
// the risk contract accepts a phone) or written as a JSON number are masked, by tool-sdk's
// redactText / redactNumber. Applied before anything is written.
import { REDACTED, redactNumber, redactText } from "@loopguard/tool-sdk";
import type { JsonValue } from "../store/session-store.js";

export { redactText };

const SENSITIVE_KEYS = new Set([
  "idcard",
  "id_card",
  "phone",
  "token",
  "authorization",
  "apikey",
  "api_key",
  "secret",
  "password",
]);

/**
 * Objects and arrays that redact() returned. Records are never mutated once built, so one that
 * is part of a larger value (an observation inside a step record) is not scanned a second time.
 */
const redacted = new WeakSet<object>();

export function redact<T extends JsonValue | readonly JsonValue[] | undefined>(value: T): T {
  const out = redactValue(value, "");
  if (out !== null && typeof out === "object") redacted.add(out);
  return out;
}

/**
 * Marks `value`, built from parts that redact() returned and the host's own fields, as redacted:
 * a record that holds it keeps it as it is, not scanned again.
 */
export function asRedacted<T extends object>(value: T): T {
  redacted.add(value);
  return value;
}

function redactValue<T extends JsonValue | readonly JsonValue[] | undefined>(value: T, key: string): T {
  if (key && SENSITIVE_KEYS.has(key.toLowerCase())) return (value === undefined ? value : REDACTED) as T;
  if (typeof value === "string") return redactText(value) as T;
  if (typeof value === "number") return redactNumber(value) as T;
  if (value === null || typeof value !== "object" || redacted.has(value)) return value;
  if (Array.isArray(value)) return value.map((v) => redactValue(v, "")) as T;
  // A loop, not fromEntries(entries().map()): no pair arrays per step (docs/performance.md).
  // defineProperty keeps an own "__proto__" key a plain key, as fromEntries does.
  const out: Record<string, JsonValue> = {};
  for (const k of Object.keys(value)) {
    const v = redactValue((value as Record<string, JsonValue>)[k], k) as JsonValue;
    if (k === "__proto__")
      Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out as T;
}
