import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { BadRequestSchema, ErrorInfoSchema } from "@loopguard/proto/gen/google/rpc/error_details_pb";
import { StatusSchema } from "@loopguard/proto/gen/google/rpc/status_pb";
import { describe, expect, it } from "vitest";
import {
  CALLER_ERROR_CODES,
  RETRY_IN_CALL_CODES,
  RETRYABLE_CODES,
  STATUS_DETAILS_KEY,
  status,
  ToolError,
  toServiceError,
} from "./errors.js";

describe("toServiceError", () => {
  it("masks id cards and mobiles in every text it puts on the wire: message, google.rpc.Status, ErrorInfo, BadRequest", () => {
    const error = new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", "phone (139)12345678 is unknown", {
      fieldViolations: [{ field: "phone", description: "got +86 (139) 1234-5678" }],
      metadata: { id_card: "11010519491231002x", order_id: "ord_DEMO00000001" },
    });
    const wire = toServiceError(error, "kb.loopguard.dev");
    expect(wire.details).toBe("phone [redacted] is unknown");
    const raw = wire.metadata!.get(STATUS_DETAILS_KEY)[0] as Buffer;
    const statusProto = fromBinary(StatusSchema, raw);
    expect(statusProto.message).toBe("phone [redacted] is unknown");
    const info = statusProto.details.map((d) => anyUnpack(d, ErrorInfoSchema)).find((d) => d !== undefined);
    expect(info?.metadata).toEqual({ id_card: "[redacted]", order_id: "ord_DEMO00000001" });
    const bad = statusProto.details.map((d) => anyUnpack(d, BadRequestSchema)).find((d) => d !== undefined);
    expect(bad?.fieldViolations.map((v) => v.description)).toEqual(["got [redacted]"]);
    expect(raw.toString("latin1")).not.toMatch(/12345678|1234-5678|11010519491231002/);
  });
});

describe("retryable codes", () => {
  it("are one set; the in-call subset leaves out only DEADLINE_EXCEEDED, and no caller mistake is retryable", () => {
    expect([...RETRY_IN_CALL_CODES].every((code) => RETRYABLE_CODES.has(code))).toBe(true);
    expect([...RETRYABLE_CODES].filter((code) => !RETRY_IN_CALL_CODES.has(code))).toEqual([status.DEADLINE_EXCEEDED]);
    expect([...CALLER_ERROR_CODES].some((code) => RETRYABLE_CODES.has(code))).toBe(false);
    expect(new ToolError(status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", "late").retryable).toBe(true);
  });
});
