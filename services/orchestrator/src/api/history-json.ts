// The JSON text of history items, serialised once per item. Items are immutable and carried over
// from step to step, so nothing serialises the whole history again on every step: the store writes
// the cached texts, token estimates sum their lengths, prompt hashes are fed them, and the chat
// request carries an observation's envelope as the same string every step.
import type { Hash } from "node:crypto";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import type { JsonValue } from "../store/session-store.js";

const texts = new WeakMap<object, string>();

export function itemJson(item: HistoryItem | ResultEnvelope | JsonValue): string {
  if (item === null || typeof item !== "object") return JSON.stringify(item);
  let text = texts.get(item);
  if (text === undefined) {
    text = JSON.stringify(item);
    texts.set(item, text);
  }
  return text;
}

/** JSON.stringify(history).length */
export function historyJsonLength(history: readonly HistoryItem[]): number {
  let chars = 2 + Math.max(0, history.length - 1);
  for (const item of history) chars += itemJson(item).length;
  return chars;
}

/** Feeds JSON.stringify(history) to `hash` piece by piece: the same digest as the whole text. */
export function hashHistory(hash: Hash, history: readonly HistoryItem[]): Hash {
  hash.update("[");
  history.forEach((item, i) => {
    if (i > 0) hash.update(",");
    hash.update(itemJson(item));
  });
  return hash.update("]");
}
