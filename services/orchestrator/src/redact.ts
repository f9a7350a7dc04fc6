// Personal data never reaches traces, step records or stored history: values under sensitive
// keys are replaced, and id card numbers and CN mobile numbers inside any string are masked.
// Applied before anything is written.
import type { JsonValue } from "./session-store.js";

const SENSITIVE_KEYS = new Set(["idcard", "id_card", "phone", "token", "authorization", "apikey", "api_key", "secret", "password"]);
// 18-character resident id numbers (17 digits + digit/X) and mainland mobiles (+86 optional).
const ID_CARD = /(?<![0-9A-Za-z])[0-9]{17}[0-9Xx](?![0-9A-Za-z])/g;
const CN_MOBILE = /(?<![0-9])(?:\+?86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}(?![0-9])/g;
export const MASK = "[redacted]";

export function redactText(text: string): string {
  return text.replace(ID_CARD, MASK).replace(CN_MOBILE, MASK);
}

export function redact<T extends JsonValue | undefined>(value: T, key = ""): T {
  if (key && SENSITIVE_KEYS.has(key.toLowerCase())) return (value === undefined ? value : MASK) as T;
  if (typeof value === "string") return redactText(value) as T;
  if (Array.isArray(value)) return value.map((v) => redact(v)) as T;
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)])) as T;
  }
  return value;
}
