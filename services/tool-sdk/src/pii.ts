// Personal data the suite handles: resident identity card numbers (GB 11643-1999) and mainland
// China mobile numbers. One implementation of "is this an id card / a CN mobile", used by risk to
// check and normalise what it is sent, and by every redactor (traces, step records, history,
// logs, error messages) to find them in free text. No gRPC in here.
import { parsePhoneNumberFromString } from "libphonenumber-js/max";

/** What a value holding personal data is replaced by. */
export const REDACTED = "[redacted]";

const ID_CARD_SHAPE = /^[0-9]{17}[0-9Xx]$/;
const ID_CARD_WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2] as const;
const ID_CARD_CHECK_CHARACTERS = "10X98765432";

/** The GB 11643 check character of the first 17 digits of an id card number. */
export function idCardCheckCharacter(first17: string): string {
  if (!/^[0-9]{17}$/.test(first17)) throw new RangeError("an id card body is 17 digits");
  let sum = 0;
  for (let i = 0; i < 17; i += 1) sum += Number(first17[i]) * ID_CARD_WEIGHTS[i]!;
  return ID_CARD_CHECK_CHARACTERS[sum % 11]!;
}

/** Upper-cases a trailing x check character; GB 11643 writes it as X. */
export function normaliseIdCard(raw: string): string {
  return raw.length === 18 && raw.endsWith("x") ? `${raw.slice(0, 17)}X` : raw;
}

/** Whether positions 7..14 (YYYYMMDD) name a real calendar day from 1900 on. */
function hasRealBirthDate(idCard: string): boolean {
  const year = Number(idCard.slice(6, 10));
  const month = Number(idCard.slice(10, 12));
  const day = Number(idCard.slice(12, 14));
  if (year < 1900 || month < 1 || month > 12 || day < 1) return false;
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/**
 * The canonical id card number (check character upper-cased) when `raw` is a well-formed
 * GB 11643 number: 17 digits with a real birth date, and the right check character.
 */
export function parseIdCard(raw: string): string | undefined {
  if (!ID_CARD_SHAPE.test(raw)) return undefined;
  const idCard = normaliseIdCard(raw);
  if (idCardCheckCharacter(idCard.slice(0, 17)) !== idCard[17]) return undefined;
  return hasRealBirthDate(idCard) ? idCard : undefined;
}

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
 * Id cards are masked where they stand alone (digits inside a longer token of letters and digits,
 * such as a trace id or a hash, are part of it), and by shape, not only when their check
 * character is right: a number with a wrong one is still a person's id, typed wrong.
 */
const ID_CARD_IN_TEXT = /(?<![0-9A-Za-z])[0-9]{17}[0-9Xx](?![0-9A-Za-z])/g;
/**
 * Stretches of what a phone may be written with ([+0-9 ()-]), from a digit and at least 11
 * characters long: the only places a mobile can be. Whether a stretch stands alone is decided
 * per piece (mobileSpans).
 */
const PHONE_RUN = /[0-9][0-9 ()+-]{10,}/g;
/** The pre-filter: an id card (17 digits) and a mobile (≥ 11 digits in ≤ 20 characters) both hold one. */
const MAY_HOLD_NUMBER = /[0-9][0-9 ()+-]{10}/;
/**
 * A cheap necessary condition on a window's digits, checked before libphonenumber (the costly
 * part, docs/performance.md) is asked: every CN mobile ends in 11 digits 1[3-9]…, after at most
 * a "0086" prefix.
 */
const MOBILE_DIGITS = /^[0-9]{0,4}1[3-9][0-9]{9}$/;

/**
 * Masks every id card number and CN mobile number standing alone in `text`, a mobile in any way
 * the risk contract accepts it ("(139)12345678", "+86 (139) 1234-5678", "86 13912345678" …):
 * candidate stretches are found by shape and masked where cnMobileToE164 says they are one.
 */
export function redactText(text: string): string {
  if (text.length < 11 || !MAY_HOLD_NUMBER.test(text)) return text;
  const masked = text.replace(ID_CARD_IN_TEXT, REDACTED);
  const spans: number[] = [];
  PHONE_RUN.lastIndex = 0;
  for (let run = PHONE_RUN.exec(masked); run; run = PHONE_RUN.exec(masked)) mobileSpans(masked, run.index, PHONE_RUN.lastIndex, spans);
  if (spans.length === 0) return masked;
  let out = "";
  let copied = 0;
  for (let i = 0; i < spans.length; i += 2) {
    out += masked.slice(copied, spans[i]) + REDACTED;
    copied = spans[i + 1]!;
  }
  return out + masked.slice(copied);
}

/** A JSON number that is a CN mobile (13912345678, 8613912345678) becomes REDACTED. */
export function redactNumber(value: number): number | string {
  if (!Number.isSafeInteger(value) || value < 1e10) return value;
  const digits = String(value);
  return MOBILE_DIGITS.test(digits) && cnMobileToE164(digits) ? REDACTED : value;
}

const isWord = (c: string | undefined) => c !== undefined && /\w/.test(c);

/**
 * Appends to `spans` (start, end pairs) the mobiles in the stretch text[start, end). The stretch
 * is cut into pieces at spaces and hyphens; from each piece, the longest window of neighbouring
 * pieces that is a CN mobile is masked, so that "13912345678 13800138000" is two numbers and
 * "139 1234 5678 12" one number and a "12". A piece joined to a token by a letter, a digit, "_"
 * or "-" is part of that token: an order id ord_013912345678 or a uuid's groups 0139-1234-5678
 * read like a mobile.
 */
function mobileSpans(text: string, start: number, end: number, spans: number[]): void {
  while (start > 0 && (text[start - 1] === "+" || text[start - 1] === "(")) start -= 1;
  const pieces: number[] = [];
  for (let i = start; i < end; ) {
    while (i < end && (text[i] === " " || text[i] === "-")) i += 1;
    const from = i;
    while (i < end && text[i] !== " " && text[i] !== "-") i += 1;
    if (i > from) pieces.push(from, i);
  }
  let first = 0;
  let last = pieces.length - 2;
  const before = text[start - 1];
  if (isWord(before) || (before === "-" && isWord(text[start - 2]))) first += 2;
  const after = text[pieces[last + 1]!];
  if (isWord(after) || (after === "-" && isWord(text[pieces[last + 1]! + 1]))) last -= 2;
  for (let i = first; i <= last; ) {
    const from = pieces[i]!;
    let j = i;
    while (j + 2 <= last && pieces[j + 3]! - from <= PHONE_MAX_CHARS) j += 2;
    let to = -1;
    for (; j >= i; j -= 2) {
      const window = text.slice(from, pieces[j + 1]);
      const digits = window.replace(/[^0-9]/g, "");
      if (digits.length < 11) break;
      if (MOBILE_DIGITS.test(digits) && cnMobileToE164(window)) {
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
    spans.push(window.startsWith("(") && (opens > closes || wrapped) ? from + 1 : from, window.endsWith(")") && (closes > opens || wrapped) ? to - 1 : to);
    i = j + 2;
  }
}
