// Letters glued on after a number (pii.ts, pii-mobile.ts): a word a person wrote ("ext12",
// "x", "please", "and"), which leaves the number standing alone, or the rest of a hex identifier
// that holds the number's digits (a trace id, a span id, a hash, a uuid's group), which it is part of.

/** What a code unit is to a token: 0 none of it, 1 a letter past "f", 2 a hex digit; a table, as a trace id is scanned whole. */
const KIND = Uint8Array.from({ length: 128 }, (_, code) => {
  const c = String.fromCharCode(code);
  if (/[0-9a-fA-F]/.test(c)) return 2;
  return /[g-zG-Z]/.test(c) ? 1 : 0;
});
const kindAt = (text: string, at: number) => KIND[text.charCodeAt(at)] ?? 0;
/** An ASCII Latin letter (full-width ones are folded to these before the search). */
export const isLetter = (c: string | undefined) =>
  c !== undefined && ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z"));

/** The run of ASCII letters and digits around `at`, [from, to), and whether it holds hex digits only. */
function tokenAround(text: string, at: number): [from: number, to: number, hex: boolean] {
  let hex = true;
  let from = at;
  for (let kind = kindAt(text, from - 1); kind !== 0; kind = kindAt(text, from - 1)) {
    hex &&= kind === 2;
    from -= 1;
  }
  let to = at;
  for (let kind = kindAt(text, to); kind !== 0; kind = kindAt(text, to)) {
    hex &&= kind === 2;
    to += 1;
  }
  return [from, to, hex];
}

/**
 * Whether the token around `end`, where letters are glued on after a number, is a hex identifier:
 * hex digits only, at least 16 characters (a 64-bit span id), and as long as a hex identifier is
 * (whole 32-bit words: 16, 24, 32, 40, 64 … characters, a span id, an ObjectId, a trace id or an
 * MD5, a SHA-1, a SHA-256) or going on at least 5 characters past the number, as a span id does
 * past a mobile. A person glues on a word or a few letters ("ab", "abc"); an identifier's random
 * digits go on. The token takes in letters before the number too ("ID…", "x…"; full-width ones
 * are folded to ASCII before the search).
 */
export function inHexIdentifier(text: string, end: number): boolean {
  const [from, to, hex] = tokenAround(text, end);
  return hex && to - from >= 16 && ((to - from) % 8 === 0 || to - end >= 5);
}

/**
 * Whether the number text[start, end) begins a token of hex digits joined by "-" to a group of hex
 * digits before it: a uuid's last group "…-8456-13912345678a", a traceparent's
 * "00-13800138000abcdef…". Within a stretch of digits and dashes that is the only sign of one; in
 * "139-1234-5678abc" the number begins at "139", and is a number written with dashes.
 */
export function beginsHexGroup(text: string, start: number, end: number): boolean {
  if (text[start - 1] !== "-") return false;
  const [from, , hex] = tokenAround(text, end);
  const [group, , groupHex] = tokenAround(text, start - 1);
  return hex && from === start && group < start - 1 && groupHex;
}

/**
 * Whether the "-" at `at`, right after a number, joins on a word a person wrote ("-ext5", "-home",
 * "-Office"): a letter first, and a letter past "f" in its token. A token of hex digits only
 * ("-abc", "-a1b2c3d4e5f6") may be a uuid's or a hex identifier's next group, and a digit first
 * ("lg-13912345678-0") a key's next part: the number goes on into them.
 */
export function dashedWord(text: string, at: number): boolean {
  return text[at] === "-" && isLetter(text[at + 1]) && !tokenAround(text, at + 1)[2];
}

/**
 * Whether a Latin letter is glued on at `end`, the end of the number text[start, end), as a word a
 * person wrote, not the rest of a hex identifier (inHexIdentifier, beginsHexGroup): then the
 * number stands alone. "13800138000abc" (14 characters), an id card with "abc" (21, 3 past it)
 * and anything with a letter past "f" ("ext", "x", "please") are words glued on.
 */
export function gluedWord(text: string, start: number, end: number): boolean {
  return isLetter(text[end]) && !inHexIdentifier(text, end) && !beginsHexGroup(text, start, end);
}
