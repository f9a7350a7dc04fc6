// Numbers spread out by separators the usual search of pii.ts does not allow: "1, 3, 8, …",
// "1|3|8", "138|0013|8000", "1_1_0_…_X", "1 - 1 - 0", "['1', '3', …]". What may stand between two
// digits of one number, and the cheap test that sends only text holding such a number to the
// search that allows it: that search costs a scan of its own, and JSON is full of "_" and ",".

/**
 * What may stand between two digits of a spread number, 1 to 4 at a time (MAX_GAP): a tab, a line
 * break, a space and every ASCII punctuation mark but ":", which joins the parts of a time
 * ("10:15:42": "10:31:52, 2026-01-15" would hold a mobile 152…).
 */
const GAP = "[\\t\\n\\r !-/;-@\\[-`{-~]";
const MAX_GAP = 4;
/** A gap of one character that the usual search allows in no id card: GAP but "-", ".", " " and "/". */
const ODD_GAP_CHAR = "[\\t\\n\\r!-,;-@\\[-`{-~]";
const isGapChar = new RegExp(GAP);
const gapCodes = Uint8Array.from({ length: 128 }, (_, code) => (isGapChar.test(String.fromCharCode(code)) ? 1 : 0));
export const isSpreadGap = (c: string | undefined) => c !== undefined && gapCodes[c.charCodeAt(0)] === 1;
const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";

/** An id card spread out (ID_CARD_IN_TEXT of pii.ts with any gap of GAP_CHARS between its characters). */
export const ID_CARD_SPREAD_IN_TEXT = new RegExp(
  `(?<![0-9])[0-9](?:${GAP}{0,${MAX_GAP}}[0-9]){16}${GAP}{0,${MAX_GAP}}[0-9Xx](?![0-9])`,
  "g",
);
/** Stretches of at least 11 digits with gaps of GAP_CHARS between them: where a spread mobile can be. */
export const SPREAD_RUN = new RegExp(`[0-9](?:${GAP}{0,${MAX_GAP}}[0-9]){10,}`, "g");
/** A gap between two digits that the usual search allows in no id card: 2 to 4 characters, or one odd one. */
const ODD = `(?:${GAP}{2,${MAX_GAP}}|${ODD_GAP_CHAR})[0-9]`;
const ODD_GAP = new RegExp(`[0-9]${ODD}`, "g");
/**
 * The first pre-filter (pii.ts): the beginning of a number of the usual searches (11 characters:
 * an id card, 17 digits, and a mobile, ≥ 11 digits in ≤ 20 characters, both begin with one) or an
 * odd gap. One regex call for the many short texts that hold neither: a second costs ~20 ns each.
 */
export const MAY_HOLD_NUMBER = new RegExp(`[0-9](?:[0-9 ()+./_-]{10}|${ODD})`);
/** Where a number of the usual searches may begin. */
export const NUMBER_BEGINS = /[0-9][0-9 ()+./_-]{10}/;
/** An odd gap inside a candidate, before its last digit or X. */
const ODD_GAP_INSIDE = new RegExp(`[0-9](?:${GAP}{2,${MAX_GAP}}|${ODD_GAP_CHAR})[0-9Xx]`);
/** The fewest digits a piece of personal data holds (a mobile). */
const MIN_DIGITS = 11;
/**
 * Whether `text` holds an odd gap (ODD_GAP) inside a run of at least 11 digits apart by gaps: one
 * regex scan of most text. "call_2_0" and "[1, 2, 3]" hold one, but too few digits around it.
 */
export function maySpread(text: string): boolean {
  ODD_GAP.lastIndex = 0;
  for (let gap = ODD_GAP.exec(text); gap; gap = ODD_GAP.exec(text)) {
    const [after, last] = digitsFrom(text, gap.index, 1);
    if (after + digitsFrom(text, gap.index, -1)[0] - 1 >= MIN_DIGITS) return true;
    ODD_GAP.lastIndex = last + 1;
  }
  return false;
}

/** The digits from `at` (a digit) on in direction `step` while gaps of at most MAX_GAP part them, and where the last stands. */
function digitsFrom(text: string, at: number, step: 1 | -1): [digits: number, last: number] {
  let digits = 0;
  let last = at;
  for (let i = at; ; ) {
    if (isDigit(text[i])) {
      digits += 1;
      last = i;
      i += step;
      continue;
    }
    let gap = 0;
    while (gap < MAX_GAP && isSpreadGap(text[i])) {
      gap += 1;
      i += step;
    }
    if (gap === 0 || !isDigit(text[i])) return [digits, last];
  }
}

/** What joins the parts of one longer number: a date's "-" or "/", a version's ".". */
const isJoiner = (c: string | undefined) => c === "-" || c === "." || c === "/";
/** What only an amount holds: a thousands "," ("13,800") or a "." before two decimals ("13.80"). */
const AMOUNT_PART = /[0-9](?:,[0-9]{3}|\.[0-9]{2})(?![0-9])/;

/**
 * Whether a candidate text[start, end) with an odd gap inside is no spread number but part of a
 * list: of amounts ("13,800, 100, 200", "13.80, 0.13, 80.00", "13,800,138,000"), or of longer
 * numbers, joined to a digit by a "-", "." or "/" (in "2026-11-29, 2026-11-30, 2026-12-01,
 * 2026-12-02" the digits from "11-30" to "2026-12" are 18 with a real date in the middle). One with
 * the usual gaps only is taken as the usual search takes it ("0-110105-19491231-002X").
 */
export function isListPart(text: string, start: number, end: number): boolean {
  const candidate = text.slice(start, end);
  if (!ODD_GAP_INSIDE.test(candidate)) return false;
  const joined =
    (isJoiner(text[start - 1]) && isDigit(text[start - 2])) || (isJoiner(text[end]) && isDigit(text[end + 1]));
  return joined || AMOUNT_PART.test(candidate);
}

/** Whether the "," at `at` is a thousands separator: a digit before it, exactly three after. */
export const separatesThousands = (text: string, at: number) =>
  text[at] === "," &&
  isDigit(text[at - 1]) &&
  isDigit(text[at + 1]) &&
  isDigit(text[at + 2]) &&
  isDigit(text[at + 3]) &&
  !isDigit(text[at + 4]);

/** Whether a value is one spread number and nothing else: digits, a final X, and gaps of at most MAX_GAP between. */
const SPREAD = new RegExp(`^[0-9](?:${GAP}{0,${MAX_GAP}}[0-9])*(?:${GAP}{0,${MAX_GAP}}[Xx])?$`);
export const isSpread = (value: string) => SPREAD.test(value);
