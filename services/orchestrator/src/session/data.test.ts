import { describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../guard/budget.js";
import { redact } from "../guard/redact.js";
import type { ResultEnvelope } from "../policies/policy.js";
import { initialUsage } from "../store/session-store-support.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import {
  contextJson,
  contextOf,
  envelopeJson,
  pendingJson,
  pendingOf,
  redactedEnvelope,
  type SessionContext,
} from "./data.js";

function record(context: JsonObject, pending: JsonObject | null = null): SessionRecord {
  return {
    id: "ses_1",
    state: "THINKING",
    version: 1,
    goal: "g",
    task: {},
    budget: DEFAULT_BUDGET,
    usage: initialUsage(0),
    context,
    pending,
    scopes: [],
    policy: "scripted",
    stopReason: null,
    answer: null,
    createdAt: 0,
    updatedAt: 0,
    leaseOwner: null,
    leaseExpiresAt: null,
    idempotencyKey: null,
    createdBy: "t",
    requestHash: null,
  };
}

describe("contextOf / pendingOf", () => {
  it("parses a context read from a store once, with defaults and the derived trace id", () => {
    const s = record(JSON.parse('{"history":[],"traceSteps":2}') as JsonObject);
    const ctx = contextOf(s);
    expect(ctx).toMatchObject({ history: [], fingerprints: [], traceSteps: 2 });
    expect(ctx.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(contextOf({ ...s, version: 2 })).toBe(ctx);
  });

  it("hands back the typed context the runner stored, without parsing it again", () => {
    const typed: SessionContext = { history: [], fingerprints: ["f"], traceId: "0".repeat(32), traceSteps: 3 };
    expect(contextOf(record(contextJson(typed)))).toBe(typed);
  });

  it("refuses a context read from a store that breaks its shape", () => {
    expect(() => contextOf(record(JSON.parse('{"history":[{"kind":"nonsense"}]}') as JsonObject))).toThrow();
  });

  it("reads no pending work as an empty queue, and a stored pending as typed", () => {
    expect(pendingOf(record({}))).toEqual({ queue: [] });
    const typed = { queue: [{ id: "c1", name: "kb_search_search", arguments: "{}" }] };
    expect(pendingOf(record({}, pendingJson(typed)))).toBe(typed);
    expect(pendingOf(record({}, JSON.parse(JSON.stringify(typed)) as JsonObject))).toEqual(typed);
  });
});

describe("redactedEnvelope", () => {
  it("masks personal data in data, error, refs and note, and keeps the host's flags and numbers", () => {
    const envelope: ResultEnvelope = {
      ok: false,
      data: { phone: "+8613912345678", note: "call 13912345678" },
      error: {
        code: "NOT_FOUND",
        message: "no user 11010519491231002X",
        retryable: false,
        suggestedAction: "ask again",
      },
      refs: ["user:13912345678"],
      costMicros: 13_912_345_678,
      servedFrom: "live",
      observedAt: "2026-12-01T00:00:00.000Z",
      note: "served from the cache for 13912345678",
    };
    const clean = redactedEnvelope(envelope);
    const text = JSON.stringify(clean);
    for (const raw of ['13912345678"', "call 13912345678", "11010519491231002X", "user:13912345678", "for 13912345678"])
      expect(text).not.toContain(raw);
    expect(clean).toMatchObject({
      ok: false,
      costMicros: 13_912_345_678,
      servedFrom: "live",
      observedAt: "2026-12-01T00:00:00.000Z",
      error: { code: "NOT_FOUND", retryable: false },
    });
  });

  it("is kept as it is inside a step record: scanned once", () => {
    const clean = redactedEnvelope({
      ok: true,
      data: { hits: [{ docId: "refund-policy", owner: "13912345678" }] },
      refs: [],
      costMicros: 0,
      servedFrom: "live",
      observedAt: "2026-12-01T00:00:00.000Z",
    });
    const record = redact({ step: 2, decision: { phone: "13912345678" }, result: envelopeJson(clean) });
    expect(record.result).toBe(clean);
    expect(JSON.stringify(record)).not.toContain("13912345678");
  });
});
