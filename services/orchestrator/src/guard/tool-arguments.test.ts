import { RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { JsonValue } from "../store/session-store.js";
import { MAX_ARGUMENTS_DEPTH } from "../session/model-bounds.js";
import { type ParsedArguments, parseToolArguments } from "./tool-arguments.js";
import { type RegisteredTool, ToolRegistry } from "../tool-registry.js";

const registry = new ToolRegistry();

function tool(name: string): RegisteredTool {
  const found = registry.get(name);
  if (!found) throw new Error(`no tool ${name}`);
  return found;
}

const VALID_ID_CARD = "11010519491231002X";

function expectInvalid(result: ParsedArguments, fields: string[]): Extract<ParsedArguments, { ok: false }> {
  if (result.ok) throw new Error("expected EINVAL, got ok");
  expect(result.code).toBe("EINVAL");
  expect(result.violations.map((v) => v.field)).toEqual(fields);
  for (const field of fields) expect(result.message).toContain(field);
  return result;
}

describe("parseToolArguments accepts", () => {
  it("a valid refund, leaving the idempotency key for the host", () => {
    const result = parseToolArguments(
      tool("billing_refund"),
      JSON.stringify({ orderId: "ord_A1b2C3d4E5f6", amountCents: 1250, reason: "REFUND_REASON_DAMAGED" }),
    );
    expect(result).toMatchObject({
      ok: true,
      message: { orderId: "ord_A1b2C3d4E5f6", amountCents: 1250n, reason: RefundReason.DAMAGED, idempotencyKey: "" },
    });
  });

  it("a valid search, risk query and order lookup", () => {
    expect(parseToolArguments(tool("kb_search_search"), '{"query":"refund window","limit":3}')).toMatchObject({
      ok: true,
    });
    expect(
      parseToolArguments(tool("risk_query_risk"), JSON.stringify({ idCard: VALID_ID_CARD, phone: "13800138000" })),
    ).toMatchObject({ ok: true });
    expect(parseToolArguments(tool("billing_get_order"), '{"orderId":"ord_A1b2C3d4E5f6"}')).toMatchObject({ ok: true });
  });

  it("protobuf's own field names as well as the JSON names", () => {
    expect(parseToolArguments(tool("billing_list_refunds"), '{"order_id":"ord_A1b2C3d4E5f6"}')).toMatchObject({
      ok: true,
      message: { orderId: "ord_A1b2C3d4E5f6" },
    });
  });
});

describe("parseToolArguments answers EINVAL for", () => {
  it("malformed JSON", () => {
    const result = expectInvalid(parseToolArguments(tool("kb_search_search"), '{"query": "refund'), []);
    expect(result.message).toMatch(/^arguments are not valid JSON: /);
  });

  it("malformed JSON, without quoting the arguments (an excerpt can cut a phone where no redactor sees it)", () => {
    const raw = '{"idCard":"110101198507212349","phone":(139)12345678,"note":"call back"}';
    const result = expectInvalid(parseToolArguments(tool("risk_query_risk"), raw), []);
    expect(result.message).toBe("arguments are not valid JSON: Unexpected token '('");
  });

  it("arguments nested deeper than the host reads, wherever the nesting is", () => {
    const nest = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
    for (const raw of [
      `{"query":${nest(7000)},"limit":1}`,
      `{"query":"refund","limit":1,"x":${nest(50_000)}}`,
      `{"query":"refund","x":${'{"a":'.repeat(3000)}1${"}".repeat(3000)}}`,
      `{"query":${nest(MAX_ARGUMENTS_DEPTH)},"limit":1}`,
    ]) {
      const result = expectInvalid(parseToolArguments(tool("kb_search_search"), raw), []);
      expect(result.message).toBe(`arguments nested deeper than ${MAX_ARGUMENTS_DEPTH}`);
    }
  });

  it("nothing for brackets inside strings, however many", () => {
    const raw = JSON.stringify({ query: `${"[{".repeat(40)}"\\`, limit: 1 });
    expect(parseToolArguments(tool("kb_search_search"), raw).ok).toBe(true);
  });

  it("JSON that is not an object", () => {
    for (const raw of ["[]", '"refund"', "null", "42"]) {
      expect(expectInvalid(parseToolArguments(tool("kb_search_search"), raw), []).message).toMatch(
        /^arguments must be a JSON object/,
      );
    }
  });

  it("an unknown field, naming it and the expected ones", () => {
    const result = expectInvalid(
      parseToolArguments(tool("kb_search_search"), '{"query":"refund","limit":3,"top_k":5}'),
      ["top_k"],
    );
    expect(result.violations[0]?.description).toBe("unknown field; expected one of: query, limit");
  });

  it("an idempotency key chosen by the model", () => {
    const raw = JSON.stringify({
      orderId: "ord_A1b2C3d4E5f6",
      amountCents: 100,
      reason: "REFUND_REASON_DAMAGED",
      idempotencyKey: "k".repeat(32),
    });
    const result = expectInvalid(parseToolArguments(tool("billing_refund"), raw), ["idempotencyKey"]);
    expect(result.violations[0]?.description).toBe("is set by the host; leave it out");
  });

  it("a value of the wrong type, saying what the schema expects", () => {
    const result = expectInvalid(parseToolArguments(tool("kb_search_search"), '{"query":"refund","limit":"three"}'), [
      "limit",
    ]);
    expect(result.violations[0]?.description).toBe('expected an integer from 1 to 10, got "three"');
  });

  it("an enum name the contract does not define", () => {
    const raw = JSON.stringify({ orderId: "ord_A1b2C3d4E5f6", amountCents: 100, reason: "BECAUSE" });
    const result = expectInvalid(parseToolArguments(tool("billing_refund"), raw), ["reason"]);
    expect(result.violations[0]?.description).toContain("one of REFUND_REASON_DAMAGED,");
  });

  it("values out of range", () => {
    expectInvalid(parseToolArguments(tool("kb_search_search"), '{"query":"refund","limit":11}'), ["limit"]);
    for (const amountCents of [0, 500001]) {
      const raw = JSON.stringify({ orderId: "ord_A1b2C3d4E5f6", amountCents, reason: "REFUND_REASON_DAMAGED" });
      expectInvalid(parseToolArguments(tool("billing_refund"), raw), ["amountCents"]);
    }
  });

  it("the unspecified enum value, which the rules exclude", () => {
    const raw = JSON.stringify({ orderId: "ord_A1b2C3d4E5f6", amountCents: 100, reason: "REFUND_REASON_UNSPECIFIED" });
    expectInvalid(parseToolArguments(tool("billing_refund"), raw), ["reason"]);
  });

  it("a value of the wrong type holding a phone, shown with the phone masked before it is shortened", () => {
    const value = { text: "x".repeat(30), phone: "+86 (139) 1234-5678" };
    const result = expectInvalid(
      parseToolArguments(tool("kb_search_search"), JSON.stringify({ query: value, limit: 3 })),
      ["query"],
    );
    expect(result.violations[0]?.description).toBe(
      `expected a string, got {"text":"${"x".repeat(30)}","phone":"[redact...`,
    );
  });

  it("missing required fields, each named", () => {
    expectInvalid(parseToolArguments(tool("kb_search_search"), "{}"), ["query", "limit"]);
  });

  it("a string that breaks its pattern", () => {
    expectInvalid(parseToolArguments(tool("billing_get_order"), '{"orderId":"ord_short"}'), ["orderId"]);
  });

  it("an id card whose check character is wrong, a rule the JSON schema cannot express", () => {
    const result = expectInvalid(
      parseToolArguments(
        tool("risk_query_risk"),
        JSON.stringify({ idCard: "110105194912310021", phone: "13800138000" }),
      ),
      ["idCard"],
    );
    expect(result.violations[0]?.description).toMatch(/GB 11643/);
  });

  it("a nested field, named by its JSON path", () => {
    const setFaults = new ToolRegistry([ToolAdminService]).get("tool_admin_set_faults");
    if (!setFaults) throw new Error("no tool_admin_set_faults");
    const raw = JSON.stringify({ profile: { errorRate: 2, methods: ["Search", ""] } });
    expectInvalid(parseToolArguments(setFaults, raw), ["profile.errorRate", "profile.methods[1]"]);
  });

  it("several problems at once, all named in one observation", () => {
    expectInvalid(
      parseToolArguments(
        tool("billing_refund"),
        '{"orderId":"ord_A1b2C3d4E5f6","amountCents":true,"reason":7,"note":"x"}',
      ),
      ["note", "amountCents", "reason"],
    );
  });
});

// Values drawn from a tool's model-visible JSON schema, for the subset of JSON Schema that
// requestSchema produces for flat requests.
function fromSchema(schema: JsonValue | undefined): fc.Arbitrary<JsonValue> {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) throw new Error("not a schema");
  const { type, minimum, maximum, minLength, maxLength, pattern } = schema;
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum);
  switch (type) {
    case "object": {
      const properties = schema.properties as { [name: string]: JsonValue };
      const model = Object.fromEntries(Object.entries(properties).map(([name, p]) => [name, fromSchema(p)]));
      return fc.record(model, { requiredKeys: schema.required as string[] }) as fc.Arbitrary<JsonValue>;
    }
    case "integer":
      return fc.integer({ min: minimum as number, max: maximum as number });
    case "string": {
      const min = typeof minLength === "number" ? minLength : 0;
      const max = typeof maxLength === "number" ? maxLength : undefined;
      if (typeof pattern !== "string")
        return fc.string({ unit: "binary", minLength: min, ...(max === undefined ? {} : { maxLength: max }) });
      // "^[class]+$" with length bounds is drawn at those lengths directly rather than filtered.
      const bounded =
        pattern.endsWith("]+$") && (min > 0 || max !== undefined)
          ? `${pattern.slice(0, -2)}{${Math.max(min, 1)},${max ?? ""}}$`
          : pattern;
      return fc
        .stringMatching(new RegExp(bounded))
        .filter((s) => [...s].length >= min && (max === undefined || [...s].length <= max));
    }
    default:
      throw new Error(`fromSchema does not draw ${String(type)}`);
  }
}

/** GB 11643: the 18th character is a weighted checksum of the first 17 digits. */
function withCheckCharacter(idCard: string, lowerCase: boolean): string {
  const weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
  const sum = weights.reduce((total, w, i) => total + w * Number(idCard[i]), 0);
  const check = "10X98765432"[sum % 11] ?? "";
  return idCard.slice(0, 17) + (lowerCase ? check.toLowerCase() : check);
}

function argumentsOf(t: RegisteredTool): fc.Arbitrary<JsonValue> {
  const drawn = fromSchema(t.spec.parameters);
  if (t.name !== "risk_query_risk") return drawn;
  // The check character is a CEL rule, outside what JSON Schema can say: fix it up.
  return fc.tuple(drawn, fc.boolean()).map(([args, lower]) => {
    const { idCard, ...rest } = args as { idCard: string };
    return { ...rest, idCard: withCheckCharacter(idCard, lower) };
  });
}

describe("parseToolArguments against the model-visible schemas", () => {
  it("the test's own id card is valid", () => {
    expect(withCheckCharacter(VALID_ID_CARD, false)).toBe(VALID_ID_CARD);
  });

  for (const t of registry.list()) {
    it(`accepts any arguments that satisfy the schema of ${t.name}`, () => {
      fc.assert(
        fc.property(argumentsOf(t), (args) => {
          const result = parseToolArguments(t, JSON.stringify(args));
          if (!result.ok) throw new Error(`${JSON.stringify(args)} refused: ${result.message}`);
        }),
      );
    });

    it(`names the field whose value has the wrong type in ${t.name}`, () => {
      const required = t.spec.parameters.required as string[];
      const wrong = fc.constantFrom<JsonValue>(true, { nested: 1 }, [1, 2]);
      fc.assert(
        fc.property(argumentsOf(t), fc.constantFrom(...required), wrong, (args, field, value) => {
          const result = parseToolArguments(t, JSON.stringify({ ...(args as object), [field]: value }));
          expect(result.ok).toBe(false);
          if (!result.ok) expect(result.violations.map((v) => v.field)).toEqual([field]);
        }),
      );
    });
  }

  it("never throws, whatever text the model sends", () => {
    const tools = registry.list();
    fc.assert(
      fc.property(fc.constantFrom(...tools), fc.oneof(fc.string(), fc.json()), (t, raw) => {
        const result = parseToolArguments(t, raw);
        expect(result.ok || result.code === "EINVAL").toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
