// Resident identity card numbers (GB 11643-1999): their shape, check character and birth date.
// pii.ts finds them in text; risk checks and normalises what it is sent with parseIdCard.

export const ID_CARD_SHAPE = /^[0-9]{17}[0-9Xx]$/;
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
export function hasRealBirthDate(idCard: string): boolean {
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
