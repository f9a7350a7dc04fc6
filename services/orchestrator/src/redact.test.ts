import { describe, expect, it } from "vitest";
import { MASK, redact, redactText } from "./redact.js";

describe("redact", () => {
  it("masks values under sensitive keys at any depth", () => {
    expect(redact({ a: { idCard: "11010519491231002X", phone: "+8613800138000", orderId: "ord_DEMO00000001" } })).toEqual({
      a: { idCard: MASK, phone: MASK, orderId: "ord_DEMO00000001" },
    });
  });

  it("masks id card and mobile numbers inside free text", () => {
    const text = redactText("customer 11010519491231002x called from +86 138-0013-8000 and 13912345678");
    expect(text).not.toMatch(/11010519491231002/);
    expect(text).not.toMatch(/138-0013-8000|13912345678/);
  });

  it("keeps an own __proto__ key (JSON can hold one) as a plain key, redacted", () => {
    const out = redact(JSON.parse('{"__proto__":{"phone":"13912345678","note":"ok"}}') as Record<string, never>);
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(JSON.stringify(out)).toBe(`{"__proto__":{"phone":"${MASK}","note":"ok"}}`);
  });

  it("does not scan again what it already redacted, and still scans what is around it", () => {
    const observation = redact({ text: "call 13912345678" });
    const record = redact({ result: observation, note: "id 11010519491231002X" });
    expect(record.result).toBe(observation);
    expect(record).toEqual({ result: { text: `call ${MASK}` }, note: `id ${MASK}` });
  });

  it("masks a number next to punctuation or other scripts, but not digits inside a hex token", () => {
    expect(redactText("手机13800138000，身份证11010519491231002X")).toBe(`手机${MASK}，身份证${MASK}`);
    expect(redactText("phone_13800138000 (13912345678)")).toBe(`phone_${MASK} (${MASK})`);
    // A trace id whose digits happen to read like a mobile number or an id card number.
    const traceIds = ["ac09a81508038a8cd16222381507dadc", "e110105194912310021f00c0ffee4242", "13800138000abcdef0123456789abcdef"];
    for (const id of traceIds) expect(redactText(`00-${id}-00f067aa0ba902b7-01`)).toBe(`00-${id}-00f067aa0ba902b7-01`);
  });

  it("leaves order ids, refund ids and amounts alone", () => {
    expect(redactText("refund rf_ABCDEFGH12345678 of 4500 cents on ord_DEMO00000001")).toBe("refund rf_ABCDEFGH12345678 of 4500 cents on ord_DEMO00000001");
  });
});
