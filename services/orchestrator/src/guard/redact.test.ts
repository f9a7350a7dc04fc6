import { REDACTED } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { redact } from "./redact.js";

describe("redact", () => {
  it("masks values under sensitive keys at any depth", () => {
    expect(
      redact({ a: { idCard: "11010519491231002X", phone: "+8613800138000", orderId: "ord_DEMO00000001" } }),
    ).toEqual({
      a: { idCard: REDACTED, phone: REDACTED, orderId: "ord_DEMO00000001" },
    });
  });

  it("masks credentials under their usual key names, however written", () => {
    const keys = ["access_token", "refreshToken", "client_secret", "private-key", "apiKey", "X-Api-Key", "bearer"];
    const more = [
      "Authorization",
      "Set-Cookie",
      "db_password",
      "passwd",
      "sessionKey",
      "aws_access_key_id",
      "credentials",
    ];
    const value = Object.fromEntries([...keys, ...more].map((k) => [k, "s3cr3t-value"]));
    expect(redact({ task: value })).toEqual({ task: Object.fromEntries(Object.keys(value).map((k) => [k, REDACTED])) });
  });

  it("masks credentials under plural and compound key names, whatever the value holds", () => {
    const keys = ["accessTokens", "refresh_tokens", "clientSecrets", "passwords", "apiKeys", "id_tokens"];
    const task = Object.fromEntries(keys.map((k) => [k, ["opaque-value-1", "opaque-value-2"]]));
    expect(redact({ ...task, auth: { refreshTokens: "opaque-value-3", tokens: { github: "opaque" } } })).toEqual({
      ...Object.fromEntries(keys.map((k) => [k, REDACTED])),
      auth: { refreshTokens: REDACTED, tokens: REDACTED },
    });
  });

  it("leaves token counts, page cursors, idempotency keys and ids under their contract names as they are", () => {
    const record = {
      session_id: "ses_01JD8Z6Q0R4T5V7W9X2Y3Z4A5B",
      budget_before: { tokens: 812, limits: { maxTokens: 100000 } },
      usage: { prompt_tokens: 812, window_tokens: 4096, saved_tokens: 12, completion_tokens: 40, tokens_used: 852 },
      context: { tokensBefore: 900, liveTokens: 0, accessTokens: 2, tokens: null },
      request: { max_tokens: 512, pageToken: "c2Vzc2lvbnM6MTA", next_page_token: "c2Vzc2lvbnM6MjA" },
      refund: { idempotencyKey: "refund-ord_DEMO00000001-1", arguments_hash: "9f2c51d0a4b8e7f3", keyId: "k1" },
      tokenizer: "o200k_base",
    };
    expect(redact(record)).toEqual(record);
  });

  it("masks JWTs, bearer tokens and prefixed API keys inside any string", () => {
    const jwt = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    expect(redact({ goal: `use Bearer ${jwt} or ghp_abcdefghijklmnopqrstuvwxyz0123456789` })).toEqual({
      goal: `use Bearer ${REDACTED} or ${REDACTED}`,
    });
  });

  it("masks id cards and mobiles, in every way risk accepts a phone, inside any string", () => {
    const task = {
      kind: "refund",
      note: "customer 11010519491231002x called from (139)12345678",
      contacts: ["+86 (139) 1234-5678", "139 1234 5678", "+86-139-1234-5678", "86 13912345678"],
    };
    expect(redact(task)).toEqual({
      kind: "refund",
      note: `customer ${REDACTED} called from ${REDACTED}`,
      contacts: [REDACTED, REDACTED, REDACTED, REDACTED],
    });
  });

  it("masks a mobile written as a JSON number, and leaves amounts and timestamps as numbers", () => {
    expect(redact({ customer: 13912345678, amountCents: 4500, startedAt: 1764411342000 })).toEqual({
      customer: REDACTED,
      amountCents: 4500,
      startedAt: 1764411342000,
    });
  });

  it("keeps an own __proto__ key (JSON can hold one) as a plain key, redacted", () => {
    const out = redact(JSON.parse('{"__proto__":{"phone":"13912345678","note":"ok"}}') as Record<string, never>);
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(JSON.stringify(out)).toBe(`{"__proto__":{"phone":"${REDACTED}","note":"ok"}}`);
  });

  it("does not scan again what it already redacted, and still scans what is around it", () => {
    const observation = redact({ text: "call 13912345678" });
    const record = redact({ result: observation, note: "id 11010519491231002X" });
    expect(record.result).toBe(observation);
    expect(record).toEqual({ result: { text: `call ${REDACTED}` }, note: `id ${REDACTED}` });
  });

  it("leaves the identifiers of a step record whole: trace ids, hashes, order and refund ids, timestamps", () => {
    const record = {
      session_id: "ses_13912345678abcdef",
      trace_id: "13800138000abcdef0123456789abcdef",
      traceparent: "00-e110105194912310021f00c0ffee4242-00f067aa0ba902b7-01",
      fingerprint: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      decision: { kind: "tool_call", arguments: '{"orderId":"ord_013912345678","amountCents":4500}' },
      result: { refund: { refundId: "rf_1391234567812345", orderId: "ord_DEMO00000001" } },
      at: "2026-11-29T10:15:42.123Z",
    };
    expect(redact(record)).toEqual(record);
  });
});
