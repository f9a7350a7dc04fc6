// Mainland China mobile numbers (pii.ts): whether a phone is one, by libphonenumber as risk
// validates it, and where they stand in text, written the ways the risk contract accepts a phone
// or spread out by other separators (pii-spread.ts).
import { parsePhoneNumberFromString } from "libphonenumber-js/max";
import { isGap } from "./pii-fold.js";
import { beginsHexGroup, dashedWord, gluedWord, inHexIdentifier, isLetter } from "./pii-glued.js";
import { isListPart, isSpreadGap, separatesThousands } from "./pii-spread.js";

/** What the risk contract accepts as a phone before normalisation: 11..20 characters of these. */
const PHONE_SHAPE = /^[+0-9 ()-]{11,20}$/;
const PHONE_MAX_CHARS = 20;

/**
 * The E.164 form ("+86…") of a mainland China mobile number written any usual way
 * ("138 0013 8000", "+86 (138) 0013-8000", "13800138000"); undefined for anything else,
 * including fixed lines and numbers of other countries.
 */
export function cnMobileToE164(raw: string): string | undefined {
  if (!PHONE_SHAPE.test(raw)) return undefined;
  const phone = parsePhoneNumberFromString(raw, "CN");
  if (phone?.country !== "CN") return undefined;
  // No isValid(): with full metadata it is getType() !== undefined, the same patterns matched twice.
  const type = phone.getType();
  return type === "MOBILE" || type === "FIXED_LINE_OR_MOBILE" ? phone.number : undefined;
}

/**
 * A window of a stretch as the risk contract's alphabet writes a phone: "." "/" "_" become spaces,
 * and a window longer than the contract's 20 characters ("1 3 9 1 2 3 4 5 6 7 8") loses its gaps.
 */
export function asContractPhone(window: string): string {
  const spaced = /[./_]/.test(window) ? window.replace(/[./_]/g, " ") : window;
  return spaced.length <= PHONE_MAX_CHARS ? spaced : spaced.replace(/[ -]/g, "");
}

/**
 * Stretches of what a phone may be written with ([+0-9 ()-], and the other gaps), from a
 * digit and at least 11 characters long: the only places a mobile can be. Whether a stretch stands
 * alone is decided per piece (mobileSpans).
 */
export const PHONE_RUN = /[0-9][0-9 ()+./_-]{10,}/g;
/**
 * A cheap necessary condition on a window's digits, checked before libphonenumber (the costly
 * part, docs/performance.md) is asked: every CN mobile ends in 11 digits 1[3-9]…, after at most
 * a "0086" prefix.
 */
export const MOBILE_DIGITS = /^[0-9]{0,4}1[3-9][0-9]{9}$/;
/** The most digits a mobile is written with: a "0086" prefix and 11. */
const MOBILE_MAX_DIGITS = 15;

export const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";
const isWord = (c: string | undefined) => c !== undefined && /\w/.test(c);

/**
 * Whether a number starting at `start` stands alone: nothing of a word before it, or letters only
 * ("ID", "phone") back to a boundary. A number joined by "_", a digit or "-" to the token before it
 * is part of that token: an order id ord_013912345678, a uuid's groups 0139-1234-5678, a key lg-…,
 * a version 1.13.800.138000.
 */
function standsAlone(text: string, start: number): boolean {
  let i = start - 1;
  while (isLetter(text[i])) i -= 1;
  return !(isWord(text[i]) || joins(text, i, i - 1));
}

/** A mobile as it is written right after a label: 11 digits 1[3-9]…, maybe after +86, 86 or 0086. */
const LABELLED_MOBILE = /^(?:\+?86|0086)?1[3-9][0-9]{9}$/;

/**
 * Whether the number text[start, end) — a stretch's first piece — is a mobile glued by one "_" or
 * "-" to a word of letters only ("phone_", "ref-", "x_+86…") and ends the token (endsToken, so also
 * "tel-13912345678-home"), or has a word glued on after it ("phone_13800138000ext5", gluedWord): a
 * label, not an identifier's part. An order id ord_139_1234_5678 is pieces of an id, and a key
 * lg-13912345678-0 goes on after the number: both stay.
 */
function gluedToLabel(text: string, start: number, end: number): boolean {
  if (text[start - 1] !== "_" && text[start - 1] !== "-") return false;
  let i = start - 2;
  while (isLetter(text[i])) i -= 1;
  if (i === start - 2 || isWord(text[i]) || joins(text, i, i - 1)) return false;
  if ((isWord(text[end]) && !gluedWord(text, start, end)) || (joins(text, end, end + 1) && !endsToken(text, end)))
    return false;
  return LABELLED_MOBILE.test(text.slice(start, end));
}

/**
 * A "_" or "-" after the number with no word after it ("13800138000_", "13800138000- ") joins nothing,
 * and a "-" before a word a person wrote ("13800138000-ext5", "-home", dashedWord) ends the number as a space does.
 */
const endsToken = (text: string, at: number) =>
  ((text[at] === "_" || text[at] === "-") && !isWord(text[at + 1])) || dashedWord(text, at);

/** A "-" between a word and the number, or a "." between digits (a decimal, a version), joins them. */
const joins = (text: string, at: number, word: number) =>
  (text[at] === "-" && isWord(text[word])) || (text[at] === "." && isDigit(text[word]));

/**
 * Appends to `spans` (start, end pairs) the mobiles in the stretch text[start, end). The stretch
 * is cut into pieces at gaps (isGap; isSpreadGap for a stretch of SPREAD_RUN); from each piece,
 * the longest window of neighbouring pieces that is a CN mobile is masked, so that
 * "13912345678 13800138000" is two numbers and "139 1234 5678 12" one number and a "12". A first
 * or last piece joined to a token (standsAlone; after it a letter, a digit, "_", "-" or "." and a
 * digit) is part of that token, unless the token is a label glued on (gluedToLabel), the "_" or "-"
 * after it ends the token (endsToken: "13800138000-ext5") or the letters after it are a word, not the
 * rest of a hex identifier (gluedWord: "13800138000ext12").
 */
export function mobileSpans(text: string, start: number, end: number, spans: number[], spread: boolean): void {
  while (start > 0 && (text[start - 1] === "+" || text[start - 1] === "(")) start -= 1;
  const gap = spread ? isSpreadGap : isGap;
  const pieces: number[] = [];
  for (let i = start; i < end; ) {
    while (i < end && gap(text[i])) i += 1;
    const from = i;
    while (i < end && !gap(text[i])) i += 1;
    if (i > from) pieces.push(from, i);
  }
  let first = 0;
  let last = pieces.length - 2;
  if (!standsAlone(text, start) && !gluedToLabel(text, start, pieces[1]!)) first += 2;
  // A stretch of one piece that is part of the token before it (a trace id's "…cd16222381507dadc"): nothing to weigh.
  if (first > last) return;
  const afterAt = pieces[last + 1]!;
  // Letters glued on after the last digit leave the last piece in unless its token goes on into a hex
  // identifier (inHexIdentifier), weighed before libphonenumber is asked. Whether the number begins a
  // group of hex groups (beginsHexGroup) is known only for a window of that piece alone, and a group
  // right after a number just masked is none ("13912345678-13800138000abc" is two numbers). Letters
  // after a "(" or ")" ("138-0013-8000 (id …") begin a word of the sentence, as before.
  const glued = isLetter(text[afterAt]) && isDigit(text[afterAt - 1]) && !inHexIdentifier(text, afterAt);
  if (!endsToken(text, afterAt) && !glued && (isWord(text[afterAt]) || joins(text, afterAt, afterAt + 1))) last -= 2;
  for (let i = first; i <= last; ) {
    const from = pieces[i]!;
    const partOfGroup =
      glued && i === last && spans[spans.length - 1] !== from - 1 && beginsHexGroup(text, from, afterAt);
    const j = boundToBefore(text, from) || partOfGroup ? -1 : mobileWindow(text, pieces, i, last, spread);
    if (j < 0) {
      i += 2;
      continue;
    }
    const to = pieces[j + 1]!;
    const window = text.slice(from, to);
    const opens = window.split("(").length - 1;
    const closes = window.split(")").length - 1;
    // A "(" or ")" of the sentence around the number stays: "(call 13912345678)", "(13912345678)".
    const wrapped = window.startsWith("(") && window.indexOf(")") === window.length - 1;
    spans.push(
      window.startsWith("(") && (opens > closes || wrapped) ? from + 1 : from,
      window.endsWith(")") && (closes > opens || wrapped) ? to - 1 : to,
    );
    i = j + 2;
  }
}

/** Inside a stretch, a "." between digits (a decimal, a version) or a thousands "," binds a piece to the one before. */
const boundToBefore = (text: string, from: number) =>
  (text[from - 1] === "." && isDigit(text[from - 2])) || separatesThousands(text, from - 1);
const boundToAfter = (text: string, to: number) =>
  (text[to] === "." && isDigit(text[to + 1])) || separatesThousands(text, to);

/**
 * The last piece (its index in `pieces`) of the longest window from piece `i` that is a CN
 * mobile, or -1. A spread window is asked by its digits alone.
 */
function mobileWindow(text: string, pieces: readonly number[], i: number, last: number, spread: boolean): number {
  let j = i;
  // The longest window a mobile may be: as many neighbouring pieces as hold at most 15 digits.
  let held = digitsIn(text, pieces[i]!, pieces[i + 1]!);
  for (; j + 2 <= last; j += 2) {
    const more = digitsIn(text, pieces[j + 2]!, pieces[j + 3]!);
    if (held + more > MOBILE_MAX_DIGITS) break;
    held += more;
  }
  for (; j >= i; j -= 2) {
    if (boundToAfter(text, pieces[j + 1]!)) continue;
    const window = text.slice(pieces[i], pieces[j + 1]);
    const digits = window.replace(/[^0-9]/g, "");
    if (digits.length < 11) return -1;
    if (!MOBILE_DIGITS.test(digits) || (spread && isListPart(text, pieces[i]!, pieces[j + 1]!))) continue;
    // A "+" right before a spread number is its country's: "+1 - 390 - 123 - 4567" is no CN mobile.
    const phone = spread ? (text[pieces[i]! - 1] === "+" ? `+${digits}` : digits) : asContractPhone(window);
    if (cnMobileToE164(phone)) return j;
  }
  return -1;
}

function digitsIn(text: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i += 1) if (isDigit(text[i])) n += 1;
  return n;
}
