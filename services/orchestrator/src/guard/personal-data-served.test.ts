import { REDACTED } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { modelView } from "./personal-data.js";
import { servedView } from "./personal-data-served.js";

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000001",
  id_card: "110101198003121232",
  phone: "+8613800138000",
  note: "call 138*0013*8000 or 139 1234 5678",
  contacts: { "138 ~ 0013 ~ 8000": "mobile" },
  accessTokens: ["opaque-value-1"],
};

/** `text` with every character written as a JSON escape ("1" as "\u0031"), behind `backslashes`. */
const escaped = (text: string, backslashes = "\\") =>
  [...text].map((c) => `${backslashes}u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

describe("servedView", () => {
  it("hides in the goal, the task and its keys what the model view hides, as REDACTED", () => {
    const served = servedView(TASK);
    const model = modelView("Refund 110101*19800312*1232, order ord_DEMO00000001", TASK);
    expect(served.text("Refund 110101*19800312*1232, order ord_DEMO00000001")).toBe(
      `Refund ${REDACTED}, order ord_DEMO00000001`,
    );
    expect(model.goal).toBe("Refund {{task.id_card}}, order ord_DEMO00000001");
    expect(served.value(TASK)).toEqual({
      kind: "refund",
      order_id: "ord_DEMO00000001",
      id_card: REDACTED,
      phone: REDACTED,
      note: `call ${REDACTED} or ${REDACTED}`,
      contacts: { [REDACTED]: "mobile" },
      accessTokens: REDACTED,
    });
    expect(model.task).toMatchObject({ contacts: { [REDACTED]: "mobile" }, accessTokens: REDACTED });
  });

  it("masks the task's own numbers in text stored redacted, and leaves other text and numbers as they are", () => {
    const served = servedView(TASK);
    expect(served.stored("Called 1-3-8-0-0-1-3-8-0-0-0, refund id rf_1391234567812345")).toBe(
      `Called ${REDACTED}, refund id rf_1391234567812345`,
    );
    expect(served.stored("Refunded 500 cents of ord_DEMO00000001 at 1764411342000")).toBe(
      "Refunded 500 cents of ord_DEMO00000001 at 1764411342000",
    );
    expect(servedView({ kind: "faq" }).text("call 138*0013*8000")).toBe(`call ${REDACTED}`);
  });

  it("masks the task's own numbers in a stored step record's text and keys, and gives back a record with none as it is", () => {
    const served = servedView(TASK);
    const record = {
      traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      decision: { kind: "tool_call", id: "110101--19800312--1232", arguments: '{"query":"138 ~ 0013 ~ 8000"}' },
      result: { hits: [{ "138*0013*8000": "mobile" }] },
    };
    expect(served.storedValue(record)).toEqual({
      traceparent: record.traceparent,
      decision: { kind: "tool_call", id: REDACTED, arguments: `{"query":"${REDACTED}"}` },
      result: { hits: [{ [REDACTED]: "mobile" }] },
    });
    const clean = { ...record, decision: { kind: "final", answer: "Refunded at 1764411342000" }, result: null };
    expect(served.storedValue(clean)).toBe(clean);
  });

  it("masks the task's own numbers written as JSON escapes, once or twice", () => {
    const served = servedView(TASK);
    const answer = `Called ${escaped("138*0013*8000")}, id ${escaped("110101~19800312~1232", "\\\\")}.`;
    expect(served.stored(answer)).toBe(`Called ${REDACTED}, id ${REDACTED}.`);
    const args = `{"query":"${escaped("1-3-8-0-0-1-3-8-0-0-0")}","limit":1}`;
    expect(served.storedValue({ decision: { arguments: args } })).toEqual({
      decision: { arguments: `{"query":"${REDACTED}","limit":1}` },
    });
  });

  it("masks the task's phone written with its country code and letters glued on", () => {
    const served = servedView(TASK);
    const refs = [
      "+8613800138000z",
      "008613800138000z",
      "8613800138000ab",
      "lg-8613800138000-0",
      "tel:+8613800138000z",
    ];
    expect(served.stored(`Refs: ${refs.join(" | ")} | +86 138*0013*8000 | 13800138000z`)).toBe(
      `Refs: ${REDACTED}z | ${REDACTED}z | ${REDACTED}ab | lg-${REDACTED}-0 | tel:${REDACTED}z | ${REDACTED} | ${REDACTED}z`,
    );
    expect(served.stored("room 5 of 8613800138001, order 1008613800138000")).toBe(
      "room 5 of 8613800138001, order 1008613800138000",
    );
  });
});
