// Personal data the suite handles: resident identity card numbers (GB 11643-1999) and mainland
// China mobile numbers. One implementation of "is this an id card / a CN mobile", used by risk to
// check and normalise what it is sent, and by every redactor (traces, step records, history,
// logs, error messages) to find them in free text. No gRPC in here.
import { parsePhoneNumberFromString } from "libphonenumber-js/max";
import { fold, GAPS, isGap, mayBeDisguised } from "./pii-fold.js";
import { hasRealBirthDate, ID_CARD_SHAPE, normaliseIdCard } from "./pii-id-card.js";
import { replaceSecrets } from "./secrets.js";

export { idCardCheckCharacter, normaliseIdCard, parseIdCard } from "./pii-id-card.js";

/** What a value holding personal data is replaced by. */
export const REDACTED = "[redacted]";

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
function asContractPhone(window: string): string {
  const spaced = /[./_]/.test(window) ? window.replace(/[./_]/g, " ") : window;
  return spaced.length <= PHONE_MAX_CHARS ? spaced : spaced.replace(/[ -]/g, "");
}

/**
 * An id card: 17 digits and a check character, each digit group optionally apart by one "-", ".",
 * " " or "/" ("110101-19800312-1232", "110101/19800312/1232"), or "_" (ID_CARD_UNDERSCORED_IN_TEXT).
 * It is masked where it stands alone or behind letters only
 * ("ID110101198003121232", idStandsAlone); digits inside a longer token of letters and digits,
 * such as a trace id or a hash, are part of it. A plain 18-character number is masked by shape, not only when its
 * check character is right (a number with a wrong one is still a person's id, typed wrong); one
 * with separators or letters before it only when it holds a real birth date, which amounts and
 * lists of numbers do not.
 */
const ID_CARD_IN_TEXT = /(?<![0-9])[0-9](?:[-. /]?[0-9]){16}[-. /]?[0-9Xx](?![0-9A-Za-z])/g;
/**
 * The same search with "_" between digit groups too ("110105_19491231_002X"). "_" in the class
 * alone made the search a third slower on JSON, whose keys are full of it, so this one runs only
 * on text where a "_" stands between two digits on each side (digitGroupsByUnderscore).
 */
const ID_CARD_UNDERSCORED_IN_TEXT = /(?<![0-9])[0-9](?:[-. /_]?[0-9]){16}[-. /_]?[0-9Xx](?![0-9A-Za-z])/g;
/**
 * Stretches of what a phone may be written with ([+0-9 ()-], and the other gaps), from a
 * digit and at least 11 characters long: the only places a mobile can be. Whether a stretch stands
 * alone is decided per piece (mobileSpans).
 */
const PHONE_RUN = /[0-9][0-9 ()+./_-]{10,}/g;
/** The pre-filter: an id card (17 digits) and a mobile (≥ 11 digits in ≤ 20 characters) both hold one. */
const MAY_HOLD_NUMBER = /[0-9][0-9 ()+./_-]{10}/;
/**
 * A cheap necessary condition on a window's digits, checked before libphonenumber (the costly
 * part, docs/performance.md) is asked: every CN mobile ends in 11 digits 1[3-9]…, after at most
 * a "0086" prefix.
 */
const MOBILE_DIGITS = /^[0-9]{0,4}1[3-9][0-9]{9}$/;
/** The most digits a mobile is written with: a "0086" prefix and 11. */
const MOBILE_MAX_DIGITS = 15;

/**
 * Where personal data stands in `text`: start, end pairs in order, each an id card number or a CN
 * mobile number standing alone (or behind letters only), a mobile in any way the risk contract
 * accepts it ("(139)12345678", "+86 (139) 1234-5678", "86 13912345678" …) and with dots between
 * its groups, and both in full-width digits. Candidates are found by shape; a mobile is one where
 * cnMobileToE164 says so.
 */
export function personalDataSpans(text: string): number[] {
  if (text.length < 11) return [];
  if (!mayBeDisguised(text)) return MAY_HOLD_NUMBER.test(text) ? spansIn(text) : [];
  const { text: folded, at } = fold(text);
  if (!MAY_HOLD_NUMBER.test(folded)) return [];
  const spans = spansIn(folded);
  // A span ends on a digit, an X or a ")": one code unit of the text, wherever it stands.
  return at === undefined ? spans : spans.map((p, i) => (i % 2 === 0 ? at[p]! : at[p - 1]! + 1));
}

function spansIn(folded: string): number[] {
  const spans: number[] = [];
  const idCards = digitGroupsByUnderscore(folded) ? ID_CARD_UNDERSCORED_IN_TEXT : ID_CARD_IN_TEXT;
  idCards.lastIndex = 0;
  for (let id = idCards.exec(folded); id; id = idCards.exec(folded)) {
    if (
      idStandsAlone(folded, id.index) &&
      ((id[0].length === 18 && !isLetter(folded[id.index - 1])) || hasRealBirthDate(id[0].replace(GAPS, "")))
    ) {
      spans.push(id.index, idCards.lastIndex);
    } else {
      idCards.lastIndex = id.index + 1;
    }
  }
  const masked = spans.length === 0 ? folded : maskSpans(folded, spans);
  const ids = spans.length;
  PHONE_RUN.lastIndex = 0;
  for (let run = PHONE_RUN.exec(masked); run; run = PHONE_RUN.exec(masked))
    mobileSpans(masked, run.index, PHONE_RUN.lastIndex, spans);
  return ids === 0 || spans.length === ids ? spans : sortSpans(spans);
}

/** `text` with each piece of personal data (personalDataSpans) replaced by what `replace` makes of it. */
export function replacePersonalData(text: string, replace: (found: string) => string): string {
  const spans = personalDataSpans(text);
  if (spans.length === 0) return text;
  let out = "";
  let copied = 0;
  for (let i = 0; i < spans.length; i += 2) {
    out += text.slice(copied, spans[i]) + replace(text.slice(spans[i], spans[i + 1]));
    copied = spans[i + 1]!;
  }
  return out + text.slice(copied);
}

const masks = () => REDACTED;

/**
 * Masks every id card number and CN mobile number standing alone in `text` (personalDataSpans),
 * and every JWT, bearer token and prefixed API key (replaceSecrets).
 */
export function redactText(text: string): string {
  return replacePersonalData(replaceSecrets(text, REDACTED), masks);
}

/**
 * The canonical form of a value that is one piece of personal data, however it is written (full
 * width, separators): an id card's 18 characters with an upper-case X, or a mobile in E.164;
 * undefined for anything else. Two values name the same person's data when their forms are equal.
 */
export function canonicalPersonalData(value: string): string | undefined {
  const folded = (mayBeDisguised(value) ? fold(value).text : value).trim();
  const compact = folded.replace(GAPS, "");
  if (ID_CARD_SHAPE.test(compact)) return normaliseIdCard(compact);
  return cnMobileToE164(asContractPhone(folded));
}

/** A JSON number that is a CN mobile (13912345678, 8613912345678) becomes REDACTED. */
export function redactNumber(value: number): number | string {
  if (!Number.isSafeInteger(value) || value < 1e10) return value;
  const digits = String(value);
  return MOBILE_DIGITS.test(digits) && cnMobileToE164(digits) ? REDACTED : value;
}

const isWord = (c: string | undefined) => c !== undefined && /\w/.test(c);
const isLetter = (c: string | undefined) => c !== undefined && ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z"));

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

/** A "-" between a word and the number, or a "." between digits (a decimal, a version), joins them. */
const joins = (text: string, at: number, word: number) =>
  (text[at] === "-" && isWord(text[word])) || (text[at] === "." && isDigit(text[word]));
const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";

/** Whether a "_" stands between two digits on each side ("110105_19491231"); a loop of indexOf, cheaper than a regex scan. */
function digitGroupsByUnderscore(text: string): boolean {
  for (let i = text.indexOf("_", 2); i > 0; i = text.indexOf("_", i + 1))
    if (isDigit(text[i - 1]) && isDigit(text[i - 2]) && isDigit(text[i + 1]) && isDigit(text[i + 2])) return true;
  return false;
}

/** An id card stands alone with nothing but letters ("ID") between it and a boundary; a digit makes it part of a token (a hash, a trace id). */
function idStandsAlone(text: string, start: number): boolean {
  let i = start - 1;
  while (isLetter(text[i])) i -= 1;
  return !isDigit(text[i]);
}

/** `text` with each span filled with "#": the same length, so later spans are spans of the text, and "#" joins no number. */
function maskSpans(text: string, spans: readonly number[]): string {
  let out = "";
  let copied = 0;
  for (let i = 0; i < spans.length; i += 2) {
    out += text.slice(copied, spans[i]) + "#".repeat(spans[i + 1]! - spans[i]!);
    copied = spans[i + 1]!;
  }
  return out + text.slice(copied);
}

/** Start, end pairs of two kinds found apart (id cards, then mobiles), in text order. */
function sortSpans(spans: number[]): number[] {
  const pairs: [number, number][] = [];
  for (let i = 0; i < spans.length; i += 2) pairs.push([spans[i]!, spans[i + 1]!]);
  return pairs.sort((a, b) => a[0] - b[0]).flat();
}

/**
 * Appends to `spans` (start, end pairs) the mobiles in the stretch text[start, end). The stretch
 * is cut into pieces at gaps (isGap); from each piece, the longest window of
 * neighbouring pieces that is a CN mobile is masked, so that "13912345678 13800138000" is two
 * numbers and "139 1234 5678 12" one number and a "12". A first or last piece joined to a token
 * (standsAlone; after it a letter, a digit, "_", "-" or "." and a digit) is part of that token.
 */
function mobileSpans(text: string, start: number, end: number, spans: number[]): void {
  while (start > 0 && (text[start - 1] === "+" || text[start - 1] === "(")) start -= 1;
  const pieces: number[] = [];
  for (let i = start; i < end; ) {
    while (i < end && isGap(text[i])) i += 1;
    const from = i;
    while (i < end && !isGap(text[i])) i += 1;
    if (i > from) pieces.push(from, i);
  }
  let first = 0;
  let last = pieces.length - 2;
  if (!standsAlone(text, start)) first += 2;
  const after = text[pieces[last + 1]!];
  if (isWord(after) || joins(text, pieces[last + 1]!, pieces[last + 1]! + 1)) last -= 2;
  for (let i = first; i <= last; ) {
    const from = pieces[i]!;
    // Inside a stretch, only a "." between digits binds a piece to the one before (a decimal, a version).
    if (text[from - 1] === "." && isDigit(text[from - 2])) {
      i += 2;
      continue;
    }
    let j = i;
    // The longest window a mobile may be: as many neighbouring pieces as hold at most 15 digits.
    let held = digitsIn(text, from, pieces[i + 1]!);
    for (; j + 2 <= last; j += 2) {
      const more = digitsIn(text, pieces[j + 2]!, pieces[j + 3]!);
      if (held + more > MOBILE_MAX_DIGITS) break;
      held += more;
    }
    let to = -1;
    for (; j >= i; j -= 2) {
      if (text[pieces[j + 1]!] === "." && isDigit(text[pieces[j + 1]! + 1])) continue;
      const window = text.slice(from, pieces[j + 1]);
      const digits = window.replace(/[^0-9]/g, "");
      if (digits.length < 11) break;
      if (MOBILE_DIGITS.test(digits) && cnMobileToE164(asContractPhone(window))) {
        to = pieces[j + 1]!;
        break;
      }
    }
    if (to < 0) {
      i += 2;
      continue;
    }
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

function digitsIn(text: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i += 1) if (isDigit(text[i])) n += 1;
  return n;
}
