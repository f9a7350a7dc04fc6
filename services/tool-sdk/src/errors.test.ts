import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { BadRequestSchema, ErrorInfoSchema } from "@loopguard/proto/gen/google/rpc/error_details_pb";
import { StatusSchema } from "@loopguard/proto/gen/google/rpc/status_pb";
import { describe, expect, it } from "vitest";
import { STATUS_DETAILS_KEY, status, ToolError, toServiceError } from "./errors.js";

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
