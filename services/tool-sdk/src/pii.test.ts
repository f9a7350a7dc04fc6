import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  canonicalPersonalData,
  cnMobileToE164,
  idCardCheckCharacter,
  normaliseIdCard,
  parseIdCard,
  personalDataSpans,
  REDACTED,
  redactNumber,
  redactText,
  replacePersonalData,
} from "./pii.js";

/** One test per case, named "refuses <what>": `parse` gives undefined for each of the case's inputs. */
function itRefuses(parse: (raw: string) => string | undefined, cases: [what: string, inputs: string[]][]): void {
  it.each(cases)("refuses %s", (_what, inputs) => {
    for (const raw of inputs) expect(parse(raw)).toBeUndefined();
  });
}

describe("GB 11643 id card", () => {
  it("computes the check character, including X", () => {
    expect(idCardCheckCharacter("11010119800312123")).toBe("2");
    expect(idCardCheckCharacter("11010119830405052")).toBe("X");
  });

  it("accepts a number whose check character matches", () => {
    expect(parseIdCard("110101198003121232")).toBe("110101198003121232");
    expect(parseIdCard("11010119830405052X")).toBe("11010119830405052X");
  });

  itRefuses(parseIdCard, [
    [
      "a number whose check character does not match",
      ["110101198003121233", "11010119830405052Y", "110101198003121230"],
    ],
    [
      "numbers of the wrong length or with letters in the body",
      ["11010119800312123", "1101011980031212321", "1101011980031212X2"],
    ],
  ]);

  it("refuses a birth date that is not a real day even with a matching check character", () => {
    const withBody = (body: string) => body + idCardCheckCharacter(body);
    expect(parseIdCard(withBody("11010119801332123"))).toBeUndefined(); // month 13
    expect(parseIdCard(withBody("11010119990229123"))).toBeUndefined(); // 1999 is no leap year
    expect(parseIdCard(withBody("11010118991231123"))).toBeUndefined(); // before 1900
    expect(parseIdCard(withBody("11010120000229123"))).toBe(withBody("11010120000229123"));
  });

  it("upper-cases a lower-case x check character", () => {
    expect(normaliseIdCard("11010119830405052x")).toBe("11010119830405052X");
    expect(parseIdCard("11010119830405052x")).toBe("11010119830405052X");
    expect(normaliseIdCard("x10101198304050521")).toBe("x10101198304050521");
  });
});

/** Ways the risk contract lets a caller write +86 139 1234 5678 (each normalised by risk). */
const PHONE_FORMATS = [
  "13912345678",
  "(139)12345678",
  "+86 (139) 1234-5678",
  "139 1234 5678",
  "+86-139-1234-5678",
  "86 13912345678",
  "+8613912345678",
  "008613912345678",
  "(+86) 139 1234 5678",
  "139-1234-5678",
  "13 91 23 45 67 8",
];

describe("CN mobile", () => {
  it.each([
    "138 0013 8000",
    "+86 138-0013-8000",
    "13800138000",
    "(+86) 138 0013 8000",
    "008613800138000",
    "+8613800138000",
  ])("writes %j as +8613800138000", (raw) => expect(cnMobileToE164(raw)).toBe("+8613800138000"));

  it.each(PHONE_FORMATS)("writes %j as +8613912345678", (raw) => expect(cnMobileToE164(raw)).toBe("+8613912345678"));

  itRefuses(cnMobileToE164, [
    ["a Beijing fixed line", ["010 1234 5678", "+86 10 1234 5678"]],
    ["a shared-cost service number", ["400 123 4567"]],
    ["foreign numbers, mobile or not", ["+1 202 555 0143", "+44 7911 123456"]],
    [
      "digits that are no valid number and text outside the contract's alphabet",
      ["12345678901", "138.0013.8000", "tel:13800138000", "1380013800"],
    ],
  ]);
});

describe("redactText", () => {
  it.each(PHONE_FORMATS)("masks the mobile written as %j inside a sentence", (phone) => {
    expect(redactText(`customer ${phone} asked for a refund`)).toBe(`customer ${REDACTED} asked for a refund`);
  });

  it.each(PHONE_FORMATS)("masks the mobile written as %j inside JSON, an error message and a log line", (phone) => {
    expect(redactText(JSON.stringify({ customer: phone }))).toBe(JSON.stringify({ customer: REDACTED }));
    expect(redactText(`invalid arguments: expected a string, got ${phone}`)).toBe(
      `invalid arguments: expected a string, got ${REDACTED}`,
    );
    expect(redactText(`Unexpected token 'x', "{"phone": ${phone}, x"... is not valid JSON`)).toBe(
      `Unexpected token 'x', "{"phone": ${REDACTED}, x"... is not valid JSON`,
    );
  });

  it("masks id cards with an upper- or lower-case check character, and with a wrong one", () => {
    expect(redactText("id 11010519491231002X and 11010519491231002x")).toBe(`id ${REDACTED} and ${REDACTED}`);
    expect(redactText("id 110101198003121233 (check character wrong)")).toBe(`id ${REDACTED} (check character wrong)`);
  });

  it("masks several numbers in one run, and only the number in a run that holds more digits", () => {
    expect(redactText("13912345678 13800138000")).toBe(`${REDACTED} ${REDACTED}`);
    expect(redactText("13912345678-13800138000")).toBe(`${REDACTED}-${REDACTED}`);
    expect(redactText("call 139 1234 5678 12 times")).toBe(`call ${REDACTED} 12 times`);
    expect(redactText("refund 100 13912345678")).toBe(`refund 100 ${REDACTED}`);
  });

  it("keeps the parentheses of the sentence around a number", () => {
    expect(redactText("phone 13800138000 (13912345678)")).toBe(`phone ${REDACTED} (${REDACTED})`);
    expect(redactText("(call 13912345678)")).toBe(`(call ${REDACTED})`);
    expect(redactText("(13912345678 or later)")).toBe(`(${REDACTED} or later)`);
  });

  it("masks numbers percent-encoded in a URL or a form body, keeping the rest as it came", () => {
    expect(redactText("callback?phone=%2B8613912345678&x=1")).toBe(`callback?phone=${REDACTED}&x=1`);
    expect(redactText("phone=%2B86%20139%201234%205678")).toBe(`phone=${REDACTED}`);
    expect(redactText("id=%20110101198003121232 and id%3D11010519491231002X")).toBe(
      `id=%20${REDACTED} and id%3D${REDACTED}`,
    );
    expect(redactText("tel%3A%28139%2912345678%29")).toBe(`tel%3A${REDACTED}%29`);
    // An encoding that is none of a number's separators stays: "%41" is "A".
    expect(redactText("50% off, code %41139")).toBe("50% off, code %41139");
  });

  it("masks a number next to punctuation or other scripts", () => {
    expect(redactText("手机13800138000，身份证11010519491231002X")).toBe(`手机${REDACTED}，身份证${REDACTED}`);
    expect(redactText("手机：(139)12345678。")).toBe(`手机：${REDACTED}。`);
  });

  it("leaves trace ids, hashes, uuids, refund and order ids, timestamps and amounts alone", () => {
    const untouched = [
      // Trace ids and span ids whose digits read like a mobile number or an id card number.
      "00-ac09a81508038a8cd16222381507dadc-00f067aa0ba902b7-01",
      "00-e110105194912310021f00c0ffee4242-00f067aa0ba902b7-01",
      "00-13800138000abcdef0123456789abcdef-13912345678abcde-01",
      "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
      "session 4b9c2e71-1390-4123-8456-13912345678a",
      "refund rf_ABCDEFGH12345678 of 4500 cents on ord_DEMO00000001",
      "refund rf_1391234567812345 on ord_139123456781 and ord_013912345678",
      "customer 4b9c2e71-0139-1234-5678-a1b2c3d4e5f6, key lg-13912345678-0",
      "2026-11-29T10:15:42.123Z",
      "at 2026-11-29 10:15:42 +08:00, 1764411342000 ms since the epoch",
      "amount 123456789 cents, refundable 500000, total 12345678901234567890",
      "fixed line 010 1234 5678 and +1 202 555 0143",
      // Amounts, versions and addresses written with the separators an id card or a phone may use.
      "refunds of 100 200 300 400 500 600 cents",
      "version 1.13.800.138000, address 10.138.0.13",
      "order total 1380013.80 and 12 345 678 901 234 567 cents",
      // A letter-glued number inside a longer token joined by "_" or a digit is part of that token.
      "customer cus_AB13800138000 and key k9x110101198003121232",
      // Hex identifiers standing alone that begin with a mobile's or an id card's digits: the
      // letters after the digits are the rest of the identifier (a trace id, a span id, a hash).
      "trace 13800138000abcdef0123456789abcde, span 13912345678abcde",
      "TRACE 13800138000ABCDEF0123456789ABCDE",
      "sha1 110101198003121232abcdef0123456789abcdef, object 110101198003121232abcdef",
      "sha256 13912345678a4b9c2e71b0f00a08e3b0c44298fc1c149afbf4c8996fb92427ae",
      "session 4b9c2e71-1390-4123-8456-13800138000f, 4B9C2E71-1390-4123-8456-13800138000F",
      // A number inside a token that goes on after a "-": a key's digit, a uuid's or a hex identifier's
      // next group, or a word after a number joined to a token before it that is no label.
      "key lg-13912345678-0 and lg-13912345678-abc, uuid 12345678-0139-1234-5678-a1b2c3d4e5f6",
      "job svc-lg-13912345678-retry, customer cus_AB13800138000-ext and order ord_013912345678-ext",
      "",
      "no digits at all",
    ];
    for (const text of untouched) expect(redactText(text)).toBe(text);
  });

  it.each([
    ["ID110101198003121232", `ID${REDACTED}`],
    ["id card: ID110101198003121232.", `id card: ID${REDACTED}.`],
    ["110101-19800312-1232", REDACTED],
    ["110101 19800312 1232", REDACTED],
    ["1101.0119.8003.1212.32 on file", `${REDACTED} on file`],
    ["x13800138000", `x${REDACTED}`],
    ["phone13800138000, please", `phone${REDACTED}, please`],
    // Glued to a label by "_" or "-": the label is no identifier the number belongs to.
    ["phone_13800138000", `phone_${REDACTED}`],
    ["Noted tel-13912345678 and cust_13700137000;", `Noted tel-${REDACTED} and cust_${REDACTED};`],
    ["x_+8613800138000 or cust_008613800138000", `x_${REDACTED} or cust_${REDACTED}`],
    ["ref-13800138000- done, 13800138000_", `ref-${REDACTED}- done, ${REDACTED}_`],
    ["138.0013.8000", REDACTED],
    ["call 138.0013.8000.", `call ${REDACTED}.`],
    ["１３８００１３８０００", REDACTED],
    ["手机：１３８ ００１３ ８０００。", `手机：${REDACTED}。`],
    ["１１０１０１１９８００３１２１２３２", REDACTED],
    ["身份证１１０１０５１９４９１２３１００２Ｘ", `身份证${REDACTED}`],
    ["ＩＤ１１０１０１－１９８００３１２－１２３２", `ＩＤ${REDACTED}`],
    // Letters glued after the number: a word, an extension, or too few hex digits for an identifier.
    ["call 13800138000abc", `call ${REDACTED}abc`],
    ["13800138000x please", `${REDACTED}x please`],
    ["tel 13800138000ext12", `tel ${REDACTED}ext12`],
    ["13800138000and more", `${REDACTED}and more`],
    ["CALL 13800138000EXT5, or +86 139 1234 5678Ext 6", `CALL ${REDACTED}EXT5, or ${REDACTED}Ext 6`],
    ["(139)12345678x and 13800138000abcd", `${REDACTED}x and ${REDACTED}abcd`],
    ["call 138-0013-8000abc or 13912345678-13800138000abc", `call ${REDACTED}abc or ${REDACTED}-${REDACTED}abc`],
    ["id 110101198003121232abc", `id ${REDACTED}abc`],
    ["id 11010519491231002Xabc and 11010519491231002xyz", `id ${REDACTED}abc and ${REDACTED}yz`],
    ["x13800138000abc, ID110101198003121232abc", `x${REDACTED}abc, ID${REDACTED}abc`],
    ["phone_13800138000ext5", `phone_${REDACTED}ext5`],
    // A word joined on after the number by "-": an extension or a place, not the rest of an identifier.
    ["call 13800138000-ext5", `call ${REDACTED}-ext5`],
    ["tel 13800138000-home, 13800138000-office please", `tel ${REDACTED}-home, ${REDACTED}-office please`],
    ["tel:13800138000-Office or 13800138000-ext.12", `tel:${REDACTED}-Office or ${REDACTED}-ext.12`],
    ["call 138-0013-8000-ext5 or +86 139 1234 5678-home", `call ${REDACTED}-ext5 or ${REDACTED}-home`],
    ["tel-13912345678-home and phone_13800138000-ext5", `tel-${REDACTED}-home and phone_${REDACTED}-ext5`],
    ["１３８００１３８０００ａｂｃ and 13800138000ｅｘｔ", `${REDACTED}ａｂｃ and ${REDACTED}ｅｘｔ`],
    ["身份证１１０１０５１９４９１２３１００２Ｘｙｚ", `身份证${REDACTED}ｙｚ`],
  ])("masks the personal data a model may write as %j to slip past", (text, masked) => {
    expect(redactText(text)).toBe(masked);
  });

  it("masks every mobile a caller may write, wherever it stands alone in text", () => {
    const national = fc
      .tuple(fc.constantFrom("13", "15", "17", "18", "19"), fc.stringMatching(/^[0-9]{9}$/))
      .map(([head, tail]) => head + tail)
      .filter((n) => cnMobileToE164(n) !== undefined);
    const written = fc.tuple(national, fc.integer({ min: 0, max: 5 })).map(([n, style]) => {
      const [a, b, c] = [n.slice(0, 3), n.slice(3, 7), n.slice(7)];
      return [`(${a})${b}${c}`, `+86 (${a}) ${b}-${c}`, `${a} ${b} ${c}`, `+86-${a}-${b}-${c}`, `86 ${n}`, n][style]!;
    });
    const words = fc.stringMatching(/^[a-z ]{0,20}$/);
    const separator = fc.constantFrom(" ", ", ", "：", '"', "'", "\n", "=");
    // Nothing, or a word glued on after the number ("ext", "x", "please") or joined by "-" ("-home"):
    // letters beyond a-f are no hex identifier's.
    const letters = fc.stringMatching(/^[A-Za-z]{0,4}[g-zG-Z][A-Za-z]{0,4}$/);
    const glued = fc.oneof(
      fc.constant(""),
      letters,
      letters.map((w) => `-${w}`),
    );
    fc.assert(
      fc.property(words, separator, written, glued, separator, words, (before, open, phone, word, close, after) => {
        const out = redactText(`${before}${open}${phone}${word}${close}${after}`);
        return out.includes(REDACTED) && !/[0-9]{3}/.test(out);
      }),
      { numRuns: 300 },
    );
  });

  it("leaves a hex identifier alone whatever mobile or id card its digits begin with", () => {
    const number = fc.constantFrom("13800138000", "13912345678", "8613912345678", "110101198003121232");
    const hex = fc.constantFrom(..."0123456789abcdef");
    const identifier = fc
      .tuple(
        number,
        fc.constantFrom(16, 24, 32, 40, 64),
        fc.constantFrom(..."abcdef"),
        fc.array(hex, { maxLength: 64 }),
      )
      .filter(([digits, length]) => digits.length < length)
      .map(([digits, length, letter, rest]) => (digits + letter + rest.join("")).padEnd(length, "0").slice(0, length))
      .chain((id) => fc.constantFrom(id, id.toUpperCase()));
    fc.assert(
      fc.property(identifier, (id) => redactText(`trace ${id} done`) === `trace ${id} done`),
      { numRuns: 300 },
    );
  });

  it("returns text with no run of 11 digits as it came", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (text) => {
        const digitsInRuns = text.split(/[^0-9 ()+.-]/).map((run) => run.replace(/[^0-9]/g, "").length);
        fc.pre(digitsInRuns.every((n) => n < 11));
        return redactText(text) === text;
      }),
    );
  });
});

describe("personal data spans and canonical forms", () => {
  it("finds id cards and mobiles in text order, whatever was found first", () => {
    const text = "phone 13800138000, id 110101198003121232, phone 139 1234 5678";
    const spans = personalDataSpans(text);
    const found = [];
    for (let i = 0; i < spans.length; i += 2) found.push(text.slice(spans[i], spans[i + 1]));
    expect(found).toEqual(["13800138000", "110101198003121232", "139 1234 5678"]);
  });

  it("replaces each piece with what the caller makes of it", () => {
    expect(
      replacePersonalData(
        "call １３８ ００１３ ８０００ or 13912345678",
        (found) => `<${canonicalPersonalData(found)}>`,
      ),
    ).toBe("call <+8613800138000> or <+8613912345678>");
  });

  it("gives one form for one person's data however it is written", () => {
    for (const written of [
      "13800138000",
      "+86 138 0013 8000",
      "138.0013.8000",
      "１３８００１３８０００",
      "(+86) 138-0013-8000",
    ])
      expect(canonicalPersonalData(written)).toBe("+8613800138000");
    for (const written of [
      "11010519491231002x",
      "110105-19491231-002X",
      "１１０１０５１９４９１２３１００２Ｘ",
      " 110105 19491231 002X ",
    ])
      expect(canonicalPersonalData(written)).toBe("11010519491231002X");
  });

  it("gives no form for what is not one piece of personal data", () => {
    for (const value of [
      "",
      "{{task.phone}}",
      "ID110101198003121232",
      "13800138000 13912345678",
      "010 1234 5678",
      "ord_DEMO00000001",
      "1234567890123456",
    ])
      expect(canonicalPersonalData(value)).toBeUndefined();
  });
});

describe("redactNumber", () => {
  it("masks a mobile written as a JSON number, with or without the country code", () => {
    expect(redactNumber(13912345678)).toBe(REDACTED);
    expect(redactNumber(8613912345678)).toBe(REDACTED);
  });

  it("leaves amounts, epoch milliseconds and other numbers alone", () => {
    for (const n of [0, 4500, 500000, 1764411342000, 12345678901, 1.5, -13912345678]) expect(redactNumber(n)).toBe(n);
  });
});
