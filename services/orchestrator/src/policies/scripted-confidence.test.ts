import { describe, expect, it } from "vitest";
import type { Decision, HistoryItem, ResultEnvelope } from "./policy.js";
import type { JsonObject } from "../store/session-store.js";
import { ScriptedPolicy } from "./scripted-policy.js";

const policy = new ScriptedPolicy();
const ORDER_OK = { order: { status: "ORDER_STATUS_PAID", refundableCents: "1000" } };
const REFUND_TASK: JsonObject = {
  kind: "refund",
  order_id: "ord_DEMO00000002",
  amount_cents: 500,
  id_card: "id",
  phone: "p",
};

function envelope(servedFrom: ResultEnvelope["servedFrom"], data?: JsonObject, error?: string): ResultEnvelope {
  return {
    ok: error === undefined && servedFrom !== "degraded",
    ...(data ? { data } : {}),
    ...(error ? { error: { code: error, message: "", retryable: true, suggestedAction: "" } } : {}),
    refs: [],
    costMicros: 0,
    servedFrom,
    observedAt: "2026-12-01T00:00:00Z",
    ...(servedFrom === "cache" ? { ageMs: 14 * 60_000 } : {}),
  };
}

const hits = (...ids: string[]): JsonObject => ({ hits: ids.map((docId) => ({ docId, version: 1, title: docId })) });
const seen = (tool: string, e: ResultEnvelope, i = 0): HistoryItem => ({
  kind: "observation",
  callId: `c${i}`,
  tool,
  envelope: e,
});

async function decide(task: JsonObject, history: HistoryItem[]): Promise<Decision> {
  return policy.decide({ goal: "Which cables are covered?", task, tools: [], history, step: history.length + 1 });
}

const sureness = (d: Decision) => [d.confidence, d.uncertaintyReason];

describe("the scripted policy's confidence in a question's answer", () => {
  it("is sure of live results with documents found", async () => {
    expect(sureness(await decide({}, [seen("kb_search_search", envelope("live", hits("a", "b")))]))).toEqual([0.9, ""]);
  });

  it("is below 0.6 with no document found, or the knowledge base down, and says why", async () => {
    expect(sureness(await decide({}, [seen("kb_search_search", envelope("live", hits()))]))).toEqual([
      0.2,
      "no document in the knowledge base matched",
    ]);
    expect(sureness(await decide({}, [seen("kb_search_search", envelope("degraded"))]))).toEqual([
      0.1,
      "the knowledge base was unavailable, so nothing was searched",
    ]);
    expect(
      sureness(await decide({}, [seen("kb_search_search", envelope("none", undefined, "DEADLINE_EXCEEDED"))])),
    ).toEqual([0.1, "the knowledge base search failed (DEADLINE_EXCEEDED)"]);
  });

  it("is less sure, above 0.6, of a cached answer or a single document; below it when a subgoal's search could not be made", async () => {
    expect(sureness(await decide({}, [seen("kb_search_search", envelope("cache", hits("a", "b")))]))).toEqual([
      0.7,
      "answered from the knowledge base's cache, as of 14 minutes ago",
    ]);
    expect(sureness(await decide({}, [seen("kb_search_search", envelope("live", hits("a")))]))).toEqual([
      0.8,
      "only one document matched",
    ]);
    const subgoal = await decide({ subgoals: ["and adapters?"] }, [
      seen("kb_search_search", envelope("live", hits("a", "b")), 0),
      seen("kb_search_search", envelope("degraded"), 1),
    ]);
    expect(sureness(subgoal)).toEqual([0.5, "1 of 2 searches could not be made"]);
  });
});

describe("the scripted policy's confidence in a refund", () => {
  const before = (policyDoc: ResultEnvelope, risk: ResultEnvelope): HistoryItem[] => [
    seen("kb_search_search", policyDoc, 0),
    seen("billing_get_order", envelope("live", ORDER_OK), 1),
    seen("risk_query_risk", risk, 2),
  ];

  it("asks for the refund sure when the policy document and the risk were read live", async () => {
    const d = await decide(
      REFUND_TASK,
      before(envelope("live", hits("refund-policy")), envelope("live", { score: 10 })),
    );
    expect(d.kind === "tool_calls" && d.calls[0]!.name).toBe("billing_refund");
    expect(sureness(d)).toEqual([0.9, ""]);
  });

  it("asks for it below 0.6, with why, when the risk or the policy document could not be read", async () => {
    const noRisk = await decide(
      REFUND_TASK,
      before(envelope("live", hits("refund-policy")), envelope("none", undefined, "UNAVAILABLE")),
    );
    expect(noRisk.kind === "tool_calls" && noRisk.calls[0]!.name).toBe("billing_refund");
    expect(sureness(noRisk)).toEqual([0.4, "the customer's risk could not be read (UNAVAILABLE)"]);
    const noPolicy = await decide(REFUND_TASK, before(envelope("degraded"), envelope("live", { score: 10 })));
    expect(sureness(noPolicy)).toEqual([
      0.4,
      "the refund policy could not be read: the knowledge base was unavailable",
    ]);
  });

  it("answers with the same confidence after the refund", async () => {
    const refund = envelope("live", { refund: { refundId: "rf_AAAAAAAAAAAAAAAA" } });
    const d = await decide(REFUND_TASK, [
      ...before(envelope("live", hits()), envelope("live", { score: 10 })),
      seen("billing_refund", refund, 3),
    ]);
    expect(d.kind).toBe("final");
    expect(sureness(d)).toEqual([0.5, "no refund policy document was found"]);
  });
});
