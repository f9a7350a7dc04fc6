import type { DescMessage } from "@bufbuild/protobuf";
import { RefundRequestSchema } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { SearchRequestSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import {
  ListSessionsRequestSchema,
  StartSessionRequestSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { status, ToolError } from "../errors.js";
import { checkJsonBody, MAX_JSON_DEPTH } from "./json-body.js";

/** The ToolError a body is refused with. */
function refusal(text: string, input: DescMessage = SearchRequestSchema): ToolError {
  try {
    checkJsonBody(input, text);
  } catch (error) {
    if (error instanceof ToolError) return error;
    throw error;
  }
  throw new Error(`${text} was accepted`);
}

describe("checkJsonBody", () => {
  it("accepts a body that decodes, by JSON names and proto names alike", () => {
    expect(() => checkJsonBody(SearchRequestSchema, '{"query":"refund","limit":3}')).not.toThrow();
    expect(() => checkJsonBody(RefundRequestSchema, '{"order_id":"ord_1","amountCents":"100"}')).not.toThrow();
    expect(() => checkJsonBody(SearchRequestSchema, "{}")).not.toThrow();
  });

  it("refuses malformed JSON as INVALID_ARGUMENT with the parser's reason but not its excerpt of the body", () => {
    const error = refusal('{"query":(139)12345678}');
    expect([status[error.code], error.reason]).toEqual(["INVALID_ARGUMENT", "REQUEST_INVALID"]);
    expect(error.message).toBe("the request is not a SearchRequest: the body is not valid JSON (Unexpected token '(')");
    expect(refusal("").message).toMatch(/not valid JSON \(Unexpected end of JSON input\)$/);
  });

  it("refuses a body that is not a JSON object", () => {
    expect(refusal("[1,2]").message).toBe(
      "the request is not a SearchRequest: the body must be a JSON object, not a list",
    );
    expect(refusal("null").message).toMatch(/not null$/);
  });

  it("refuses a field the message lacks, naming it", () => {
    const error = refusal('{"query":"refund","colour":"red"}');
    expect(error.message).toBe("the request is not a SearchRequest: colour is not a field of SearchRequest");
    expect(error.fieldViolations).toEqual([{ field: "colour", description: "is not a field of SearchRequest" }]);
  });

  it("refuses values of the wrong type, every field named with what it must be", () => {
    const error = refusal('{"query":5,"limit":"many"}');
    expect(error.fieldViolations).toEqual([
      { field: "query", description: "must be a string" },
      { field: "limit", description: "must be a number" },
    ]);
    expect(refusal('{"reason":"SOMETIMES"}', RefundRequestSchema).fieldViolations).toEqual([
      { field: "reason", description: "must be one of the enum's value names" },
    ]);
  });

  it("names a value of the right JSON type that the field cannot hold by fromJson's reason, not as a wrong type", () => {
    const negative = refusal('{"pageSize":-1}', ListSessionsRequestSchema);
    expect(negative.fieldViolations).toEqual([
      { field: "page_size", description: "is invalid: expected number (uint32): -1 out of range" },
    ]);
    expect(negative.message).toBe(
      "the request is not a ListSessionsRequest: page_size is invalid: expected number (uint32): -1 out of range",
    );
    expect(refusal('{"pageSize":"1.5"}', ListSessionsRequestSchema).fieldViolations).toEqual([
      { field: "page_size", description: "is invalid: expected number (uint32), got 1.5" },
    ]);
  });

  it("names the inner field at fault by its path inside a message", () => {
    const start = (budget: string) =>
      refusal(`{"goal":"x","budget":${budget}}`, StartSessionRequestSchema).fieldViolations;
    expect(start('{"maxTokens":"99999999999999999999999"}')).toEqual([
      {
        field: "budget.max_tokens",
        description: "is invalid: expected bigint (uint64): 99999999999999999999999 out of range",
      },
    ]);
    expect(start('{"maxTokens":"lots"}')).toEqual([{ field: "budget.max_tokens", description: "must be a number" }]);
    expect(start('{"colour":1}')).toEqual([{ field: "budget.colour", description: "is not a field of Budget" }]);
    expect(start('"x"')).toEqual([{ field: "budget", description: "must be an object" }]);
  });

  it("quotes no personal data and no long value from fromJson's reason", () => {
    const phone = refusal('{"pageSize":13912345678}', ListSessionsRequestSchema);
    expect(phone.message).toMatch(/page_size is invalid: expected number \(uint32\): .* out of range$/);
    expect(phone.message).not.toContain("13912345678");
    const long = refusal(`{"budget":{"maxTokens":"${"9".repeat(200)}"}}`, StartSessionRequestSchema);
    expect(long.fieldViolations).toEqual([
      { field: "budget.max_tokens", description: "is invalid: expected bigint (uint64)" },
    ]);
  });

  it("names at most ten problems however many keys a body has, and echoes no long key", () => {
    const body = `{${Array.from({ length: 50_000 }, (_, i) => `"k${i}":0`).join(",")}}`;
    const error = refusal(body);
    expect(error.fieldViolations).toHaveLength(10);
    expect(error.message.length).toBeLessThan(1000);
    expect(error.message).toMatch(/\(only the first 10 problems of the body's 50000 keys are named\)$/);
    const long = refusal(`{"${"x".repeat(65)}":1}`);
    expect(long.fieldViolations).toEqual([
      { field: "", description: "a key of 65 characters is not a field of SearchRequest" },
    ]);
    expect(long.message).not.toContain("xxx");
  });

  it(`refuses a body nested deeper than ${MAX_JSON_DEPTH} levels before decoding it`, () => {
    const nested = (depth: number) => `{"query":"q","x":${'{"a":'.repeat(depth)}1${"}".repeat(depth)}}`;
    expect(refusal(nested(2000)).message).toBe(
      `the request is not a SearchRequest: the body nests deeper than ${MAX_JSON_DEPTH} levels`,
    );
    expect(refusal(nested(MAX_JSON_DEPTH - 2)).message).toMatch(/x is not a field/);
  });
});
