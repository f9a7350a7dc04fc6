// The fold personal data is searched in (pii.ts): a number keeps its digits however it is
// written, so what only changes its look — full-width digits, Unicode spaces and dashes, invisible
// characters, percent-encoding, JSON escapes — is folded to the ASCII the search knows, with where
// each folded character stood.

/**
 * What changes a number's look but not its digits, folded away before the search: full-width
 * forms (U+FF01..U+FF5E) to ASCII ("１３８ ００１３ ８０００"), every Unicode space to " " (a
 * no-break or thin space), every dash to "-" (an en dash), the ideographic comma to "," ("1、3、8"),
 * invisible format characters (a zero-width space, a soft hyphen, bidi marks) dropped, and the
 * percent-encoded characters that stand around or between a number's digits in a URL or a form
 * body decoded ("phone=%2B86%20139…": space, "+", "-", ".", "/", ":", "=", "(", ")", "_"), and
 * JSON's \uXXXX escapes decoded, however many backslashes stand before the "u": a model writes its
 * arguments' digits as "\u0031\u0033…", and a JSON string holding those raw arguments as "\\u0031…".
 */
const DISGUISE =
  /(?![ -])[\p{Zs}\p{Pd}\p{Cf}\uFF01-\uFF5E\u3001]|%(?:2[0BbDdEeFf89]|3[AaDd]|5[Ff])|\\+u[0-9A-Fa-f]{4}/gu;
/** A character an escape may stand for that is itself folded: "\uff11" is "１", which is "1". */
const DISGUISED_CHAR = /^(?![ -])[\p{Zs}\p{Pd}\p{Cf}\uFF01-\uFF5E\u3001]$/u;
/**
 * Whether a text may hold a DISGUISE character, without a scan for most: V8 answers TWO_BYTE at
 * once for a string it stores one byte a character (ASCII and Latin-1 text), and the only Latin-1
 * disguises are U+00A0, U+00AD, a percent-encoding's "%" and an escape's "\u", which `includes`
 * finds at memchr speed. A character-class scan of 1.5 KB costs ~1.4 µs, about a tenth of redacting it.
 */
const TWO_BYTE = /[\u0100-\uffff]/;
export const mayBeDisguised = (text: string) =>
  TWO_BYTE.test(text) ||
  text.includes("\u00a0") ||
  text.includes("\u00ad") ||
  text.includes("%") ||
  text.includes("\\u");
const SPACE = /\p{Zs}/u;
const DASH = /\p{Pd}/u;
function foldChar(c: string): string {
  if (c.length === 3) return String.fromCharCode(Number.parseInt(c.slice(1), 16));
  if (c.length > 3) {
    const decoded = String.fromCharCode(Number.parseInt(c.slice(-4), 16));
    return DISGUISED_CHAR.test(decoded) ? foldChar(decoded) : decoded;
  }
  const code = c.charCodeAt(0);
  if (code >= 0xff01 && code <= 0xff5e) return String.fromCharCode(code - 0xfee0);
  if (code === 0x3001) return ",";
  return SPACE.test(c) ? " " : DASH.test(c) ? "-" : "";
}

/** A text folded (DISGUISE); `at[i]` is where its i-th code unit stands in the text, absent when every one stands where it was. */
export interface Folded {
  readonly text: string;
  readonly at?: readonly number[];
}

/** `text` folded; called where mayBeDisguised(text), the rest of the text is its own fold. */
export function fold(text: string): Folded {
  const folded = text.replace(DISGUISE, foldChar);
  if (folded.length === text.length) return { text: folded };
  const at: number[] = [];
  let from = 0;
  DISGUISE.lastIndex = 0;
  for (let m = DISGUISE.exec(text); m; m = DISGUISE.exec(text)) {
    for (let i = from; i < m.index; i += 1) at.push(i);
    if (foldChar(m[0]) !== "") at.push(m.index);
    from = m.index + m[0].length;
  }
  for (let i = from; i < text.length; i += 1) at.push(i);
  return { text: folded, at };
}

/** Where the character folded from `text` at `start` ends: past a percent-encoding's three, past an escape's backslashes and five. */
export function foldedEnd(text: string, start: number): number {
  if (text[start] === "%") return start + 3;
  let end = start;
  while (text[end] === "\\") end += 1;
  return end === start ? start + 1 : end + 5;
}

/** What may stand between the digit groups of a number once folded: "138 0013 8000", "138-0013-8000", "138.0013.8000", "138/0013/8000", "139_1234_5678". */
export const GAPS = /[-. /_]/g;
export const isGap = (c: string | undefined) => c === " " || c === "-" || c === "." || c === "/" || c === "_";
