// Session ids.
import { randomUUID } from "node:crypto";

const ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/**
 * `ses_` + 9 characters of creation time (milliseconds, base 36) + 11 random ones: ids of
 * sessions created together sort together, so the store's indexes keyed by session id (sessions,
 * audit rows, steps) touch a few recent pages per commit instead of one random page per session.
 */
export function newSessionId(now: number): string {
  const time = now.toString(36).padStart(9, "0");
  // randomUUID, not randomBytes: it draws on a cached entropy pool (docs/performance.md, "Random
  // ids"). The UUID's version digit (12) and variant digit (16) are fixed, so they are left out.
  const hex = randomUUID().replaceAll("-", "");
  const random = hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17);
  let id = `ses_${time}`;
  for (let i = 0; i < 22; i += 2) id += ID_ALPHABET[Number.parseInt(random.slice(i, i + 2), 16) % ID_ALPHABET.length];
  return id;
}
