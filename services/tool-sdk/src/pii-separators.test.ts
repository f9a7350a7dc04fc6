import { describe, expect, it } from "vitest";
import { canonicalPersonalData, personalDataSpans, REDACTED, redactText } from "./pii.js";

describe("redactText with separators other than space, hyphen and dot", () => {
  it.each([
    ["a no-break space", "138\u00a00013\u00a08000"],
    ["a narrow no-break space", "138\u202f0013\u202f8000"],
    ["a thin space", "138\u20090013\u20098000"],
    ["an ideographic space", "138\u30000013\u30008000"],
    ["a zero-width space inside the number", "1380013\u200b8000"],
    ["soft hyphens", "138\u00ad0013\u00ad8000"],
    ["a word joiner and a byte order mark", "138\u20600013\ufeff8000"],
    ["slashes", "138/0013/8000"],
    ["underscores", "139_1234_5678"],
    ["en dashes", "138\u20130013\u20138000"],
    ["em dashes", "138\u20140013\u20148000"],
    ["a Unicode hyphen and a +86 with a no-break space", "+86\u00a0138\u20100013\u20108000"],
    ["one digit at a time", "1 3 9 1 2 3 4 5 6 7 8"],
    ["a hyphen around every group and spaces", "+86 - 139 - 1234 - 5678"],
  ])("masks a mobile written with %s", (_how, phone) => {
    expect(redactText(`customer ${phone} asked for a refund`)).toBe(`customer ${REDACTED} asked for a refund`);
  });

  it.each([
    ["slashes", "110101/19800312/1232"],
    ["a zero-width space", "110101\u200b198003121232"],
    ["no-break spaces", "110101\u00a019800312\u00a01232"],
    ["en dashes", "110101\u201319800312\u20131232"],
    ["underscores", "110105_19491231_002X"],
    ["an underscore between every group", "110101_1980_0312_1232"],
  ])("masks an id card written with %s", (_how, idCard) => {
    expect(redactText(`id ${idCard} on file`)).toBe(`id ${REDACTED} on file`);
  });

  it("masks only the number, keeping the invisible characters around it where they were", () => {
    const text = "x\u200b13800138000\u200b, then \u00a0139\u00a01234\u00a05678.";
    expect(redactText(text)).toBe(`x\u200b${REDACTED}\u200b, then \u00a0${REDACTED}.`);
    const spans = personalDataSpans(`\u200b\u200b1380013\u200b8000 and 110101/19800312/1232`);
    expect(spans).toEqual([2, 14, 19, 39]);
  });

  it("gives one canonical form to the number however it is apart", () => {
    for (const written of ["138\u00a00013\u00a08000", "1380013\u200b8000", "138/0013/8000", "1 3 8 0 0 1 3 8 0 0 0"])
      expect(canonicalPersonalData(written)).toBe("+8613800138000");
    expect(canonicalPersonalData("110101/19800312/1232")).toBe("110101198003121232");
    expect(canonicalPersonalData("110101\u200b198003121232")).toBe("110101198003121232");
  });

  it("leaves dates, ids, versions and amounts written with these separators alone", () => {
    const untouched = [
      "2026/11/29 10:15:42, 29/11/2026, 11/29/26",
      "2026\u201311\u201329T10:15:42.123Z",
      "order ord_DEMO00000001, refund rf_1391234567812345, id ord_139_1234_5678",
      "call_2_0 and call_13_0, key lg-13912345678-0",
      "customer 4b9c2e71-0139-1234-5678-a1b2c3d4e5f6",
      "session 4b9c2e71\u20130139\u20131234\u20135678\u2013a1b2c3d4e5f6",
      "amounts 100/200/300/400/500 cents, 1\u00a0380\u00a0013,80 CNY",
      "fixed line 010\u00a01234\u00a05678, +1\u00a0202\u00a0555\u00a00143",
      "ratio 13/91/23/45",
      "no digits\u00a0at\u200ball",
    ];
    for (const text of untouched) expect(redactText(text)).toBe(text);
  });
});
