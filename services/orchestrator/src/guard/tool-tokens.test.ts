import { create } from "@bufbuild/protobuf";
import { RefundReason, RefundRequestSchema } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { newKeyPair, requestDigest, signingKeyFromJwk } from "@loopguard/tool-sdk";
import { decodeJwt } from "jose";
import { describe, expect, it } from "vitest";
import { ToolRegistry } from "../tool-registry.js";
import { ToolTokens } from "./tool-tokens.js";

const registry = new ToolRegistry();
const tokens = new ToolTokens(signingKeyFromJwk(newKeyPair("unit-orchestrator").privateJwk));
const deadline = Date.now() + 2000;

describe("ToolTokens", () => {
  it("binds an irreversible call's token to the exact request sent, and mints one per call", async () => {
    const refund = registry.get("billing_refund")!;
    const request = create(RefundRequestSchema, {
      orderId: "ord_DEMO00000001",
      amountCents: 500n,
      reason: RefundReason.DAMAGED,
      idempotencyKey: "tokens-unit-0001",
    });
    const first = await tokens.for("s1", refund, deadline, request);
    const second = await tokens.for("s1", refund, deadline, request);
    expect(second).not.toBe(first);
    expect(decodeJwt(first)).toMatchObject({
      sub: "session:s1",
      aud: "billing",
      scope: "billing:refund",
      req: requestDigest(RefundRequestSchema, request),
    });
    const other = await tokens.for(
      "s1",
      refund,
      deadline,
      create(RefundRequestSchema, { ...request, amountCents: 501n }),
    );
    expect(decodeJwt(other).req).not.toBe(decodeJwt(first).req);
    await expect(tokens.for("s1", refund, deadline)).rejects.toThrow(
      /billing_refund is irreversible: its token is bound to the request/,
    );
  });

  it("reuses a read's token for the same session and method, bound to no request", async () => {
    const read = registry.get("billing_get_order")!;
    const token = await tokens.for("s1", read, deadline);
    expect(await tokens.for("s1", read, deadline)).toBe(token);
    expect(decodeJwt(token).req).toBeUndefined();
  });
});
