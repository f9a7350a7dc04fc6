import { create } from "@bufbuild/protobuf";
import { RefundReason, RefundRequestSchema } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CallError,
  CallKeyChecker,
  newCallSecret,
  newKeyPair,
  readCallKeys,
  requestDigest,
  signingKeyFromJwk,
  status,
  TOKEN_CLOCK_SKEW_MS,
  toolCallKeys,
  UNKNOWN_CALL_KEY,
} from "@loopguard/tool-sdk";
import { tempDir } from "@loopguard/test-kit";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import { ToolRegistry } from "../tool-registry.js";
import { REFUSED_KEY_MS, ToolTokens } from "./tool-tokens.js";

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

  it("reuses a credential only while it covers the new call's deadline plus the clock-skew allowance", async () => {
    const read = registry.get("kb_search_search")!;
    // A whole second plus 100 ms: the first credential expires at start + 6 s (rounded up).
    const start = Math.ceil(Date.now() / 1000) * 1000 + 60_000;
    const first = await tokens.for("skew", read, start + 100);
    const margin = (token: string, deadline: number) => decodeJwt(token).exp! * 1000 - deadline;
    expect(await tokens.for("skew", read, start + 900)).toBe(first);
    // Its expiry is past this deadline, but by less than the allowance: a new credential.
    const later = await tokens.for("skew", read, start + 2000);
    expect(later).not.toBe(first);
    expect(margin(later, start + 2000)).toBeGreaterThanOrEqual(TOKEN_CLOCK_SKEW_MS);
  });

  it("names the method called (claim mth): a session's calls to two methods of one scope get two credentials", async () => {
    const queryRisk = registry.get("risk_query_risk")!;
    const customerRisk = registry.get("risk_get_customer_risk")!;
    const one = await tokens.for("s1", queryRisk, deadline);
    const other = await tokens.for("s1", customerRisk, deadline);
    expect(other).not.toBe(one);
    expect(decodeJwt(one)).toMatchObject({ scope: "risk:read", mth: "/loopguard.risk.v1.RiskService/QueryRisk" });
    expect(decodeJwt(other)).toMatchObject({
      scope: "risk:read",
      mth: "/loopguard.risk.v1.RiskService/GetCustomerRisk",
    });
    expect(await tokens.for("s1", queryRisk, deadline)).toBe(one);
  });

  it("with call secrets, mints HS256 credentials the tool checks with its own key, and follows a rotation", async () => {
    const { dir, remove } = tempDir("call-secrets");
    onTestFinished(remove);
    const file = join(dir, "call-secrets.json");
    const first = newCallSecret("call-a");
    const second = newCallSecret("call-b");
    const write = (keys: object[]) => {
      writeFileSync(`${file}.tmp`, JSON.stringify({ keys }));
      renameSync(`${file}.tmp`, file);
    };
    write([first]);
    const reloads: unknown[] = [];
    const calls = new ToolTokens(
      signingKeyFromJwk(newKeyPair("unit-orchestrator-2").privateJwk),
      { file, secrets: readCallKeys({ keys: [first] }) },
      (outcome) => reloads.push(outcome),
    );
    const read = registry.get("billing_get_order")!;
    const both = readCallKeys({ keys: [first, second] });
    const billing = new CallKeyChecker(readCallKeys(toolCallKeys(both, "billing"), "billing"), "billing", "test");
    const before = await calls.for("s1", read, deadline);
    expect(decodeProtectedHeader(before)).toMatchObject({ alg: "HS256", kid: "call-a" });
    expect(billing.check(before, Date.now())?.caller).toMatchObject({
      subject: "session:s1",
      method: "/loopguard.billing.v1.BillingService/GetOrder",
    });
    // The operator puts the new secret first: the next credential (even for a cached pair) uses it.
    write([second, first]);
    await new Promise((r) => setTimeout(r, 1100));
    const after = await calls.for("s1", read, deadline);
    expect(decodeProtectedHeader(after).kid).toBe("call-b");
    expect(billing.check(after, Date.now())?.caller.keyId).toBe("call-b");
    expect(reloads).toEqual([{ kids: ["call-b"] }]);
    // A broken file keeps the secret in use.
    writeFileSync(file, "{");
    await new Promise((r) => setTimeout(r, 1100));
    expect(decodeProtectedHeader(await calls.for("s2", read, deadline)).kid).toBe("call-b");
    expect(reloads.at(-1)).toMatchObject({ error: expect.stringMatching(/not JSON; the keys read before stay/) });
  });

  it("a tool that refuses the key minted with gets credentials under the next key held, for a minute, then the first again", async () => {
    const { dir, remove } = tempDir("call-secrets");
    onTestFinished(remove);
    const file = join(dir, "call-secrets.json");
    const [fresh, held] = [newCallSecret("call-new"), newCallSecret("call-old")];
    writeFileSync(file, JSON.stringify({ keys: [fresh, held] }));
    const told: string[][] = [];
    const calls = new ToolTokens(
      signingKeyFromJwk(newKeyPair("unit-orchestrator-3").privateJwk),
      { file, secrets: readCallKeys({ keys: [fresh, held] }) },
      undefined,
      (tool, refused, instead) => told.push([tool, refused, instead]),
    );
    const read = registry.get("billing_get_order")!;
    const refusal = (kid: string, code = status.UNAUTHENTICATED) =>
      new CallError({
        code,
        message: "refused",
        reason: "CREDENTIALS_INVALID",
        metadata: { [UNKNOWN_CALL_KEY]: kid },
        attempts: 1,
        tool: "billing",
        method: "GetOrder",
      });
    const kidOf = async (session: string) => decodeProtectedHeader(await calls.for(session, read, deadline)).kid;
    expect(await kidOf("s1")).toBe("call-new");
    // Another code, a key it is not minted with, or one not held, changes nothing.
    expect(calls.refusedKey("billing", refusal("call-new", status.PERMISSION_DENIED))).toBe(false);
    expect(calls.refusedKey("billing", refusal("call-old"))).toBe(false);
    expect(calls.refusedKey("billing", refusal("never-held"))).toBe(false);
    const now = Date.now();
    expect(calls.refusedKey("billing", refusal("call-new"), now)).toBe(true);
    expect(told).toEqual([["billing", "call-new", "call-old"]]);
    // Another session's call, minted with the refused key before the refusal, is sent again too (told once).
    expect(calls.refusedKey("billing", refusal("call-new"), now)).toBe(true);
    expect(told).toHaveLength(1);
    // The cached credential under the refused key is not handed out again; other tools keep the first key.
    expect(await kidOf("s1")).toBe("call-old");
    expect(decodeProtectedHeader(await calls.for("s1", registry.get("risk_query_risk")!, deadline)).kid).toBe(
      "call-new",
    );
    // Refused the last key held too: nothing left to try.
    expect(calls.refusedKey("billing", refusal("call-old"), now)).toBe(false);
    // The mark runs out: the first key is tried again.
    expect(calls.refusedKey("billing", refusal("call-new"), now + REFUSED_KEY_MS)).toBe(true);
    vi.useFakeTimers({ now: now + 3 * REFUSED_KEY_MS, toFake: ["Date"] });
    try {
      expect(await kidOf("s2")).toBe("call-new");
    } finally {
      vi.useRealTimers();
    }
  });
});
