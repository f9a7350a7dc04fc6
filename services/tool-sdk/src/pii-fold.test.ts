import { describe, expect, it } from "vitest";
import { canonicalPersonalData, REDACTED, redactText } from "./pii.js";

/** `text` with every character written as a JSON escape, as a model may write its arguments: "1" as "\u0031". */
const escaped = (text: string, backslashes = "\\") =>
  [...text].map((c) => `${backslashes}u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

describe("redactText with numbers written as JSON escapes", () => {
  it("masks a mobile and an id card in a model's raw tool arguments", () => {
    expect(redactText(`{"query":"${escaped("13800138000")}","limit":1}`)).toBe(`{"query":"${REDACTED}","limit":1}`);
    expect(redactText(`{"query":"refund","${escaped("110101198003121232")}":1}`)).toBe(
      `{"query":"refund","${REDACTED}":1}`,
    );
  });

  it("masks them escaped twice, as a JSON string holding raw arguments writes them", () => {
    expect(redactText(`"{\\"query\\":\\"${escaped("13800138000", "\\\\")}\\"}"`)).toBe(
      `"{\\"query\\":\\"${REDACTED}\\"}"`,
    );
    expect(redactText(`id ${escaped("11010519491231002X", "\\\\")} on file`)).toBe(`id ${REDACTED} on file`);
  });

  it("masks a number escaped only in part, in upper-case hex, or with a country code", () => {
    expect(redactText(`call 138${escaped("0013")}8000 now`)).toBe(`call ${REDACTED} now`);
    expect(redactText("call \\u0031\\u0033\\u0039\\u0031\\u0032\\u0033\\u0034\\u0035\\u0036\\u0037\\u0038")).toBe(
      `call ${REDACTED}`,
    );
    expect(redactText(`tel ${escaped("+86 139")}\\u00A01234\\u002D5678.`)).toBe(`tel ${REDACTED}.`);
  });

  it("masks an escaped number with escaped letters glued after, keeping the letters", () => {
    expect(redactText(`call ${escaped("13800138000ext")}5`)).toBe(`call ${REDACTED}${escaped("ext")}5`);
    expect(redactText(`call ${escaped("13800138000-home")}`)).toBe(`call ${REDACTED}${escaped("-home")}`);
  });

  it("masks an escaped full-width digit or an escaped zero-width space between the digits", () => {
    expect(redactText(`phone \\uff11\\uff138\\u200b0013 8000`)).toBe(`phone ${REDACTED}`);
  });

  it("masks an answer's text holding escaped numbers, keeping the words around them", () => {
    const answer = `Done for ${escaped("13800138000")} / ${escaped("110101198003121232")}.`;
    expect(redactText(answer)).toBe(`Done for ${REDACTED} / ${REDACTED}.`);
  });

  it("gives an escaped number the canonical form of the number", () => {
    expect(canonicalPersonalData(escaped("13800138000"))).toBe("+8613800138000");
    expect(canonicalPersonalData(escaped("110101198003121232", "\\\\"))).toBe("110101198003121232");
  });

  it("leaves other escapes, and escaped numbers that are no one's data, alone", () => {
    const untouched = [
      '{"name":"caf\\u00e9 \\u4e2d\\u6587","n":"\\u0031\\u0032\\u0033"}',
      `order ${escaped("ord_1391234567812345")}, key ${escaped("lg-13912345678-0")}`,
      "path C:\\users\\u1 and \\u12 and \\uZZZZ",
      `amount ${escaped("100/200/300/400")}`,
    ];
    for (const text of untouched) expect(redactText(text)).toBe(text);
  });
});
