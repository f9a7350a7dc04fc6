import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalPersonalData, REDACTED, redactText } from "./pii.js";

const ID_CARD = "11010519491231002X";
const MOBILE = "13800138000";
/** `number` with `gap` between every two of its characters: "1_1_0_…_X". */
const spread = (number: string, gap: string) => [...number].join(gap);
/** `text` with its number masked: from its first digit to its last digit or X, what stands around it kept ("['[redacted]']"). */
const masked = (text: string) => text.replace(/[0-9０-９].*[0-9０-９XＸ]/su, REDACTED);

describe("redactText with a number spread out by any short run of separators", () => {
  it.each([
    ["one digit at a time with underscores", spread(ID_CARD, "_")],
    ["one digit at a time with mixed separators", "1-1.0 1/0_5-1.9 4/9_1-2.3 1/0_0-2.X"],
    ["a hyphen and spaces between every digit", spread(ID_CARD, " - ")],
    ["a comma list of digits", spread(ID_CARD, ", ")],
    ["bars between digits", spread(ID_CARD, "|")],
    ["bars between groups", "110105|19491231|002X"],
    ["a JSON list of one-digit strings", JSON.stringify([...ID_CARD])],
    ["a Python list of one-digit strings", `[${[...ID_CARD].map((c) => `'${c}'`).join(", ")}]`],
    ["full-width digits and underscores", spread("１１０１０５１９４９１２３１００２Ｘ", "_")],
    ["full-width digits and full-width low lines", spread("１１０１０５１９４９１２３１００２Ｘ", "＿")],
    ["ideographic commas", spread(ID_CARD, "、")],
    ["underscores and a word glued after", `${spread(ID_CARD, "_")}yz`],
  ])("masks an id card written as %s", (_how, idCard) => {
    expect(redactText(`id ${idCard} on file`)).toBe(`id ${masked(idCard)} on file`);
  });

  it.each([
    ["one digit at a time with underscores", spread(MOBILE, "_")],
    ["one digit at a time with mixed separators", "1-3.8 0/0_1-3.8 0/0_0"],
    ["a hyphen and spaces between every digit", spread(MOBILE, " - ")],
    ["a comma list of digits", spread(MOBILE, ", ")],
    ["commas without spaces between digits", spread(MOBILE, ",")],
    ["bars between digits", spread(MOBILE, "|")],
    ["commas between groups", "138, 0013, 8000"],
    ["bars between groups", "138|0013|8000"],
    ["semicolons and stars", "138;0013*8000"],
    ["a JSON list of one-digit strings", JSON.stringify([...MOBILE])],
    ["a Python list of one-digit strings", `[${[...MOBILE].map((c) => `'${c}'`).join(", ")}]`],
    ["full-width digits and underscores", spread("１３８００１３８０００", "_")],
    ["full-width digits and full-width commas", spread("１３８００１３８０００", "，")],
    ["ideographic commas", spread(MOBILE, "、")],
    ["one digit a line", spread(MOBILE, "\n")],
    ["a comma list of digits and an extension glued after", `${spread(MOBILE, ", ")}ext`],
    ["bars between groups and letters glued after", "138|0013|8000abc"],
    ["a comma list of digits and a word joined by a dash", `${spread(MOBILE, ", ")}-home`],
  ])("masks a mobile written as %s", (_how, phone) => {
    expect(redactText(`customer ${phone} asked for a refund`)).toBe(`customer ${masked(phone)} asked for a refund`);
  });

  it("masks only the number among other numbers, and leaves a foreign number spread out alone", () => {
    expect(redactText("refunds 100, 139, 1234, 5678")).toBe(`refunds 100, ${REDACTED}`);
    expect(redactText("ids 5|110105|19491231|002X|7")).toBe(`ids 5|${REDACTED}|7`);
    expect(redactText("call +1 - 390 - 123 - 4567")).toBe("call +1 - 390 - 123 - 4567");
  });

  it("masks every id card and mobile with any short run of separators between its digits", () => {
    const gapRun = fc.stringMatching(/^[-_ ,|;/*#'"()[\]{}+=~<>!?]{1,3}$/);
    const number = fc.constantFrom(ID_CARD, "110101198003121232", MOBILE, "13912345678", "8613912345678");
    const written = fc
      .tuple(number, fc.array(gapRun, { minLength: 17, maxLength: 17 }))
      .map(([n, gaps]) => [...n].map((c, i) => (i === 0 ? c : gaps[i - 1] + c)).join(""));
    fc.assert(
      fc.property(written, (number) => {
        const out = redactText(`customer ${number} asked`);
        return out.includes(REDACTED) && !/[0-9]/.test(out);
      }),
      { numRuns: 300 },
    );
  });

  it("gives a spread number its canonical form", () => {
    expect(canonicalPersonalData(spread(MOBILE, ", "))).toBe("+8613800138000");
    expect(canonicalPersonalData("138|0013|8000")).toBe("+8613800138000");
    expect(canonicalPersonalData(spread(ID_CARD, "_"))).toBe(ID_CARD);
    expect(canonicalPersonalData("+1 - 202 - 555 - 0143")).toBeUndefined();
  });

  it("leaves timestamps, dates, uuids, versions, lists of counts, order ids and amounts alone", () => {
    const untouched = [
      "2026-11-29T10:15:42.123Z, 2026-11-30T11:16:43.456Z",
      "at 2026-11-29 10:15:42, 2026-11-30 11:16:43 and 2026/12/01 13:00:00",
      "epoch ms [1764411342000, 1764411343000, 1764411344000]",
      "dates 2026-11-29, 2026-11-30, 2026-12-01, 2026-12-02",
      "4b9c2e71-0139-1234-5678-a1b2c3d4e5f6, 13912345-6781-4234-9567-000000000001",
      "node 20.11.1, pnpm 9.12.3, libphonenumber-js 1.11.14, 1.12.8, 1.13.0",
      '{"counts":[1, 2, 3],"retries":[0,1,0,2],"digits":[1, 3, 8, 0, 0, 1, 3, 8, 0, 0]}',
      "items per order [12, 7, 30, 4, 28, 25, 6, 41, 9, 3, 1, 2, 2]",
      "steps 1, 2, 3, 4 and 5 of 10, 20, 30, 40, 50",
      "| 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12 |",
      "orders ord_DEMO00000002, ord_DEMO00000003; call_2_0, call_13_0, call_1_3_9",
      "refunds of 13,800,138,000 cents, ¥1,380,013.80, 1,234,567,890.12 and $139,123,456.78",
      "amounts 1,380, 2,500, 13,800, 100, 200, 300, 400, 500",
      "fixed lines 010, 1234, 5678 and 010|1234|5678",
    ];
    for (const text of untouched) expect(redactText(text)).toBe(text);
  });
});
