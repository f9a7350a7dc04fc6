// Personal data and credentials never reach traces, step records or stored history: values under
// sensitive keys are replaced, and id card numbers and CN mobile numbers inside any string (in
// every way the risk contract accepts a phone) or written as a JSON number are masked, and so are
// JWTs, bearer tokens and prefixed API keys in any string, by tool-sdk's redactText /
// redactNumber. Applied before anything is written.
import { REDACTED, redactNumber, redactText } from "@loopguard/tool-sdk";
import type { JsonValue } from "../store/session-store.js";

export { redactText };

/** Keys whose value is personal data, by normalised name (normalKey: "id_card", "idCard", "Phone"). */
const PERSONAL_KEYS = new Set(["idcard", "phone"]);
/**
 * Keys whose value is a credential, by normalised name: access_token, refreshToken, client_secret,
 * private_key, apiKey, X-Api-Key, aws_access_key_id, Authorization, bearer, Cookie, sessionKey,
 * db_password, passwd, credentials, and their plurals (clientSecrets, passwords, apiKeys; accessTokens
 * below). A session_id is not one: it names a session, the host's own.
 */
const CREDENTIAL_NAME =
  /token|secret|passw(?:or)?d|apikey|privatekey|accesskey|credential|authorization|bearer|cookie|sessionkey/;
/**
 * Names with "token" that hold a page cursor or name a tokenizer, never a credential: the
 * contracts' page_token, next_page_token, a tokenizer or tokenCounter.
 */
const NOT_A_CREDENTIAL = /tokeniz|tokencount|pagetoken/;
/**
 * Names with "tokens" name a count of model tokens (max_tokens, prompt_tokens, window_tokens,
 * saved_tokens, tokens_used, the budget's tokens and maxTokens, tokensBefore) as often as
 * credentials (accessTokens, refresh_tokens): a number under one is a count, anything else a credential.
 */
const COUNT_OR_CREDENTIAL = /tokens/;

const normalKey = (key: string) => key.toLowerCase().replace(/[^a-z0-9]/g, "");

/** What the value under a key is, by the key's name alone; "count": a number is a count, any other value a credential. */
export type KeyKind = "personal" | "credential" | "count" | undefined;

/** Answers by key: a step record's keys repeat; any other key (a model's) is remembered up to a bound. */
const kindByKey = new Map<string, KeyKind>();
const MAX_KEYS_REMEMBERED = 4096;

export function keyKind(key: string): KeyKind {
  if (kindByKey.has(key)) return kindByKey.get(key);
  const name = normalKey(key);
  const kind = PERSONAL_KEYS.has(name)
    ? "personal"
    : !CREDENTIAL_NAME.test(name) || NOT_A_CREDENTIAL.test(name)
      ? undefined
      : COUNT_OR_CREDENTIAL.test(name)
        ? "count"
        : "credential";
  if (kindByKey.size >= MAX_KEYS_REMEMBERED) kindByKey.clear();
  kindByKey.set(key, kind);
  return kind;
}

/** Whether a value may hold a credential: text, or a list or an object; a number, a flag or null holds none. */
const mayHoldText = (value: unknown) => typeof value === "string" || (typeof value === "object" && value !== null);

/** Whether the value under `key` is a credential, by the key's name and, under a "count" name, the value's type. */
export function isCredentialUnder(key: string, value: unknown): boolean {
  const kind = keyKind(key);
  return kind === "credential" || (kind === "count" && mayHoldText(value));
}

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
  if (key) {
    const kind = keyKind(key);
    if (kind !== undefined && (kind !== "count" || mayHoldText(value)))
      return (value === undefined ? value : REDACTED) as T;
  }
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
