// Personal data the suite handles: resident identity card numbers (GB 11643-1999) and mainland
// China mobile numbers. One implementation of "is this an id card / a CN mobile", used by risk to
// check and normalise what it is sent, and by every redactor (traces, step records, history,
// logs, error messages) to find them in free text. No gRPC in here.
import { fold, foldedEnd, GAPS, mayBeDisguised } from "./pii-fold.js";
import { gluedWord, isLetter } from "./pii-glued.js";
import { hasRealBirthDate, ID_CARD_SHAPE, normaliseIdCard } from "./pii-id-card.js";
import { asContractPhone, cnMobileToE164, isDigit, MOBILE_DIGITS, mobileSpans, PHONE_RUN } from "./pii-mobile.js";
import {
  ID_CARD_SPREAD_IN_TEXT,
  isListPart,
  isSpread,
  MAY_HOLD_NUMBER,
  maySpread,
  NUMBER_BEGINS,
  SPREAD_RUN,
} from "./pii-spread.js";
import { replaceSecrets } from "./secrets.js";

export { idCardCheckCharacter, normaliseIdCard, parseIdCard } from "./pii-id-card.js";
export { cnMobileToE164 } from "./pii-mobile.js";
export { type Folded, fold, foldedEnd, mayBeDisguised } from "./pii-fold.js";

/** What a value holding personal data is replaced by. */
export const REDACTED = "[redacted]";

/**
 * An id card: 17 digits and a check character, each digit group optionally apart by one "-", ".",
 * " " or "/" ("110101-19800312-1232", "110101/19800312/1232"), or by any short run of separators
 * where maySpread finds one (ID_CARD_SPREAD_IN_TEXT: "110105_19491231_002X", "1, 1, 0, …, X").
 * It is masked where it stands alone or behind letters only
 * ("ID110101198003121232", idStandsAlone), with letters glued on after it or not ("…1232abc",
 * gluedWord); digits inside a longer token of letters and digits, such as a trace id or a hash,
 * are part of it. A plain 18-character number is masked by shape, not only when its
 * check character is right (a number with a wrong one is still a person's id, typed wrong); one
 * with separators or letters before it only when it holds a real birth date, which amounts and
 * lists of numbers do not.
 */
const ID_CARD_IN_TEXT = /(?<![0-9])[0-9](?:[-. /]?[0-9]){16}[-. /]?[0-9Xx](?![0-9])/g;

/**
 * Where personal data stands in `text`: start, end pairs in order, each an id card number or a CN
 * mobile number standing alone (or behind letters only, or with a word glued on after: pii-glued.ts),
 * a mobile in any way the risk contract accepts it ("(139)12345678", "+86 (139) 1234-5678",
 * "86 13912345678" …) and with dots between
 * its groups, both spread out by any short run of separators ("1, 3, 8, …", "1_1_0_…_X"; pii-spread.ts)
 * and in full-width digits. Candidates are found by shape; a mobile is one where cnMobileToE164 says so.
 */
export function personalDataSpans(text: string): number[] {
  if (text.length < 11) return [];
  if (!mayBeDisguised(text)) return spansIn(text);
  const { text: folded, at } = fold(text);
  const spans = spansIn(folded);
  // A span ends on a digit, an X or a ")": one code unit of the text, or the code units of its encoding or escape.
  if (at === undefined) return spans;
  return spans.map((p, i) => (i % 2 === 0 ? at[p]! : foldedEnd(text, at[p - 1]!)));
}

/**
 * Id cards first, then mobiles in what is left, from where a number may begin (NUMBER_BEGINS: in
 * a step record's JSON, two thirds in); in all the text where maySpread finds a number spread out,
 * by searches that allow any short run of separators (pii-spread.ts).
 */
function spansIn(folded: string): number[] {
  if (!MAY_HOLD_NUMBER.test(folded)) return [];
  const spread = maySpread(folded);
  const from = spread ? 0 : folded.search(NUMBER_BEGINS);
  if (from < 0) return [];
  const spans: number[] = [];
  const idCards = spread ? ID_CARD_SPREAD_IN_TEXT : ID_CARD_IN_TEXT;
  idCards.lastIndex = from;
  for (let id = idCards.exec(folded); id; id = idCards.exec(folded)) {
    if (isIdCard(folded, id.index, id[0], spread)) {
      spans.push(id.index, idCards.lastIndex);
    } else {
      idCards.lastIndex = id.index + 1;
    }
  }
  let masked = spans.length === 0 ? folded : maskSpans(folded, spans);
  const ids = spans.length;
  mobilesIn(masked, PHONE_RUN, from, false, spans);
  if (spread) {
    if (spans.length > ids) masked = maskSpans(masked, spans.slice(ids));
    mobilesIn(masked, SPREAD_RUN, from, true, spans);
  }
  return inOrder(spans) ? spans : sortSpans(spans);
}

/**
 * Whether a candidate found at `start` is an id card: standing alone (idStandsAlone) with nothing
 * or a word glued on after it (gluedWord), and plain (18 characters, no letter before) or holding
 * a real birth date; a spread one no part of a list (isListPart).
 */
function isIdCard(text: string, start: number, found: string, spread: boolean): boolean {
  const end = start + found.length;
  if (!idStandsAlone(text, start) || (isLetter(text[end]) && !gluedWord(text, start, end))) return false;
  if (spread && isListPart(text, start, end)) return false;
  return (found.length === 18 && !isLetter(text[start - 1])) || hasRealBirthDate(found.replace(/[^0-9Xx]/g, ""));
}

function mobilesIn(text: string, runs: RegExp, from: number, spread: boolean, spans: number[]): void {
  runs.lastIndex = from;
  for (let run = runs.exec(text); run; run = runs.exec(text))
    mobileSpans(text, run.index, runs.lastIndex, spans, spread);
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
 * A name a caller sent (a tool, a method), quoted as an error echoes it: masked, and only when it
 * is 64 characters or fewer; a longer one by its length alone.
 */
export function echoedName(name: string): string {
  return name.length <= 64 ? JSON.stringify(redactText(name)) : `(a name of ${name.length} characters)`;
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
  const mobile = cnMobileToE164(asContractPhone(folded));
  return mobile === undefined && isSpread(folded) ? spreadForm(folded) : mobile;
}

/** The form of a spread number ("1, 3, 8, …", "110105|19491231|002X"): its digits and X alone. */
function spreadForm(value: string): string | undefined {
  const digits = value.replace(/[^0-9Xx]/g, "");
  return ID_CARD_SHAPE.test(digits) ? normaliseIdCard(digits) : cnMobileToE164(digits);
}

/** A JSON number that is a CN mobile (13912345678, 8613912345678) becomes REDACTED. */
export function redactNumber(value: number): number | string {
  if (!Number.isSafeInteger(value) || value < 1e10) return value;
  const digits = String(value);
  return MOBILE_DIGITS.test(digits) && cnMobileToE164(digits) ? REDACTED : value;
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

function inOrder(spans: readonly number[]): boolean {
  for (let i = 2; i < spans.length; i += 2) if (spans[i]! < spans[i - 1]!) return false;
  return true;
}

/** Start, end pairs of kinds found apart (id cards, then mobiles, then spread mobiles), in text order. */
function sortSpans(spans: number[]): number[] {
  const pairs: [number, number][] = [];
  for (let i = 0; i < spans.length; i += 2) pairs.push([spans[i]!, spans[i + 1]!]);
  return pairs.sort((a, b) => a[0] - b[0]).flat();
}
