import { REDACTED } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import {
  modelView,
  type PersonalField,
  personalFieldsOf,
  reidentify,
  shownArguments,
  withTaskValues,
} from "./personal-data.js";
import { ToolRegistry } from "../tool-registry.js";

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000001",
  amount_cents: 500,
  id_card: "110101198003121232",
  phone: "+8613800138000",
};
const RISK: PersonalField[] = [
  { jsonName: "idCard", name: "id_card", taskField: "id_card" },
  { jsonName: "phone", name: "phone", taskField: "phone" },
];

describe("modelView", () => {
  it("shows each personal value of the task as the placeholder of its path, and the rest as it is", () => {
    const { task } = modelView("Refund", { ...TASK, customer: { phone: "138 0013 8000", mobiles: ["13912345678"] } });
    expect(task).toEqual({
      kind: "refund",
      order_id: "ord_DEMO00000001",
      amount_cents: 500,
      id_card: "{{task.id_card}}",
      phone: "{{task.phone}}",
      customer: { phone: "{{task.customer.phone}}", mobiles: ["{{task.customer.mobiles.0}}"] },
    });
  });

  it("in the goal and the task's text, names the task's values by placeholder however written, and redacts anyone else's", () => {
    const view = modelView(
      "Refund the customer 138-0013-8000 (id ID１１０１０１１９８００３１２１２３２), not 13912345678",
      { ...TASK, note: "also known as 110101-19800312-1232" },
    );
    expect(view.goal).toBe(`Refund the customer {{task.phone}} (id ID{{task.id_card}}), not ${REDACTED}`);
    expect(view.task.note).toBe("also known as {{task.id_card}}");
  });

  it("never makes a placeholder that holds personal data: a key that is a number is redacted", () => {
    const view = modelView("Refund", { contacts: { "13912345678": "13800138000" } });
    expect(JSON.stringify(view)).not.toMatch(/139|138/);
    expect(view.task).toEqual({ contacts: { [REDACTED]: REDACTED } });
  });

  it("names the task's own numbers by placeholder with any separators between their digits", () => {
    const goal = "Call 138*0013*8000 or 1,3,8,0,0,1,3,8,0,0,0, id 110101#19800312#1232; not 139*1234*5678";
    const view = modelView(goal, { ...TASK, note: "his mobile: 138\u00a00013\u200b8000 / 138~0013~8000" });
    expect(view.goal).toBe(`Call {{task.phone}} or {{task.phone}}, id {{task.id_card}}; not ${REDACTED}`);
    expect(view.task.note).toBe("his mobile: {{task.phone}} / {{task.phone}}");
  });

  it("names the task's own numbers written as JSON escapes by placeholder", () => {
    const escaped = "\\u0031\\u0033\\u0038*\\u0030\\u0030\\u0031\\u0033*\\u0038\\u0030\\u0030\\u0030";
    expect(modelView(`Call ${escaped} now`, TASK).goal).toBe("Call {{task.phone}} now");
  });

  it("names the task's phone with its country code and letters glued on by placeholder", () => {
    const view = modelView("Call +8613800138000z", { ...TASK, note: "key lg-8613800138000-0" });
    expect(view.goal).toBe("Call {{task.phone}}z");
    expect(view.task.note).toBe("key lg-{{task.phone}}-0");
  });

  it("shows no credential: values under credential keys and tokens in the text are redacted", () => {
    const jwt = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    const view = modelView(`Refund; my key is sk-proj-AbCdEfGhIjKlMnOpQrSt`, {
      ...TASK,
      access_token: jwt,
      auth: { clientSecret: "cs_live_51HqLyjWDarjtT1zdp7dc" },
      note: `Bearer ${jwt}`,
      max_tokens: 512,
    });
    expect(view.goal).toBe(`Refund; my key is ${REDACTED}`);
    expect(view.task).toMatchObject({
      access_token: REDACTED,
      auth: { clientSecret: REDACTED },
      note: `Bearer ${REDACTED}`,
      max_tokens: 512,
    });
  });

  it("shows a phone written as a JSON number as a placeholder too", () => {
    expect(modelView("Refund", { phone: 13800138000 }).task).toEqual({ phone: "{{task.phone}}" });
  });
});

describe("withTaskValues", () => {
  const substitute = (args: Record<string, unknown>, task: Record<string, unknown> = TASK) =>
    withTaskValues("risk_query_risk", RISK, args, task as never);

  it("puts the task's values where the model wrote their placeholders", () => {
    expect(substitute({ idCard: "{{task.id_card}}", phone: "{{task.phone}}" })).toEqual({
      ok: true,
      value: { idCard: TASK.id_card, phone: TASK.phone },
    });
  });

  it("accepts the task's own value however written, and sends it as the task has it", () => {
    expect(substitute({ id_card: "110101-19800312-1232", phone: "138 0013 8000" })).toEqual({
      ok: true,
      value: { id_card: TASK.id_card, phone: TASK.phone },
    });
  });

  it("refuses another person's id card, naming the bound", () => {
    const refused = substitute({ idCard: "11010519491231002X", phone: "{{task.phone}}" });
    expect(refused).toEqual({
      ok: false,
      message:
        "risk_query_risk.idCard must be the task's id_card ({{task.id_card}}); the host reads personal data only for the people the task names",
      suggestedAction: "pass {{task.id_card}} as idCard, exactly as the task shows it",
    });
  });

  it("refuses another field's placeholder, an unknown placeholder, and a value in a shape no person's data has", () => {
    for (const idCard of ["{{task.phone}}", "{{task.customer.id_card}}", "ID110101198003121232", "anyone"])
      expect(substitute({ idCard }).ok).toBe(false);
  });

  it("refuses any value when the task names none, under either name of the field", () => {
    const { id_card: _, ...noIdCard } = TASK;
    expect(substitute({ idCard: "{{task.id_card}}" }, noIdCard)).toMatchObject({
      ok: false,
      message: expect.stringContaining("this task names none"),
    });
    expect(substitute({ id_card: "110101198003121232" }, noIdCard).ok).toBe(false);
  });

  it("leaves an absent or empty field to the contract's rules", () => {
    expect(substitute({ phone: "{{task.phone}}", idCard: "" })).toEqual({
      ok: true,
      value: { phone: TASK.phone, idCard: "" },
    });
  });
});

describe("the rest", () => {
  it("reads the personal-data fields from the contract", () => {
    expect(personalFieldsOf(new ToolRegistry().get("risk_query_risk")!.method)).toEqual(RISK);
    expect(personalFieldsOf(new ToolRegistry().get("billing_refund")!.method)).toEqual([]);
  });

  it("keeps the model's placeholders in the history and redacts the rest", () => {
    expect(shownArguments(RISK, { idCard: TASK.id_card, phone: TASK.phone, note: "call 13912345678" })).toEqual({
      idCard: "{{task.id_card}}",
      phone: "{{task.phone}}",
      note: `call ${REDACTED}`,
    });
  });

  it("re-identifies the placeholders of an answer from the task, and leaves the others", () => {
    expect(
      reidentify("Customer {{task.phone}} ({{task.id_card}}) of {{task.missing}} and {{task.customer}}", {
        ...TASK,
        customer: { phone: "x" },
      }),
    ).toBe("Customer +8613800138000 (110101198003121232) of {{task.missing}} and {{task.customer}}");
  });
});
