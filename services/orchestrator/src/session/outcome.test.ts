import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { describe, expect, it } from "vitest";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import type { StopReason } from "./session-state.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import { SideEffectRules } from "../guard/side-effects.js";
import { ToolRegistry } from "../tool-registry.js";
import { outcomeOf, reasonLabel } from "./outcome.js";

const rules = new SideEffectRules(new ToolRegistry([KbSearchService, BillingService, RiskService]));
const REFUND_TASK = { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 500 };

function envelope(servedFrom: ResultEnvelope["servedFrom"], error?: string): ResultEnvelope {
  return {
    ok: error === undefined,
    ...(error ? { error: { code: error, message: "", retryable: true, suggestedAction: "" } } : { data: {} }),
    refs: [],
    costMicros: 0,
    servedFrom,
    observedAt: "2026-12-01T00:00:00Z",
  };
}

function ended(
  stopReason: StopReason,
  task: JsonObject,
  history: HistoryItem[],
  effects: { tool: string; entityId?: string; amount?: number }[] = [],
): SessionRecord {
  return {
    id: "ses_test",
    state: stopReason === "done" ? "DONE" : "FAILED",
    stopReason,
    task,
    pending: null,
    context: {
      history,
      effects: effects.map((e) => ({ key: "k", entity: "order", entityId: "ord_DEMO00000002", amount: 500, ...e })),
    } as unknown as JsonObject,
  } as unknown as SessionRecord;
}

const seen = (tool: string, e: ResultEnvelope): HistoryItem => ({
  kind: "observation",
  callId: "c",
  tool,
  envelope: e,
});

describe("outcomeOf", () => {
  it("a forwarded call (single-call) refused by its tool is not done, naming the code; any other policy's answer after it may still succeed", () => {
    const history = [seen("kb_search_search", envelope("none", "EINVAL"))];
    expect(outcomeOf({ ...ended("done", {}, history), policy: "single-call" } as SessionRecord, rules)).toEqual({
      kind: "not_done",
      reason: "call_failed: EINVAL",
    });
    expect(
      outcomeOf(
        { ...ended("done", {}, [seen("kb_search_search", envelope("live"))]), policy: "single-call" } as SessionRecord,
        rules,
      ),
    ).toEqual({ kind: "succeeded", reason: "" });
    expect(outcomeOf({ ...ended("done", {}, history), policy: "scripted" } as SessionRecord, rules)?.kind).toBe(
      "succeeded",
    );
  });

  it("a running session has none", () => {
    expect(outcomeOf({ ...ended("done", {}, []), state: "PARKED", stopReason: null }, rules)).toBeUndefined();
  });

  it("a refund task succeeded only when its refund was made, whatever the answer says", () => {
    expect(outcomeOf(ended("done", REFUND_TASK, [], [{ tool: "billing_refund" }]), rules)).toEqual({
      kind: "succeeded",
      reason: "",
    });
    expect(
      outcomeOf(ended("done", REFUND_TASK, [seen("billing_refund", envelope("none", "UNAVAILABLE"))]), rules),
    ).toEqual({ kind: "not_done", reason: "no_effect: billing_refund" });
  });

  describe("a refund task succeeded only when what was refunded is what it asked for", () => {
    const refund = (entityId: string, amount: number) => ({ tool: "billing_refund", entityId, amount });
    const ONE = { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 5000 };
    const TWO = { kind: "refund", order_ids: ["ord_DEMO00000001", "ord_DEMO00000002"], amount_cents: 12_000 };

    it("1 cent of a 5000-cent task is partial, saying what was refunded of what", () => {
      expect(outcomeOf(ended("done", ONE, [], [refund("ord_DEMO00000001", 1)]), rules)).toEqual({
        kind: "partial",
        reason: "not_as_asked: billing_refund moved 1 of the 5000 amount_cents asked for (order ord_DEMO00000001: 1)",
      });
    });

    it("a task naming two orders with only one refunded is partial, naming the one left, even when the amount is all there", () => {
      expect(outcomeOf(ended("done", TWO, [], [refund("ord_DEMO00000001", 6000)]), rules)).toEqual({
        kind: "partial",
        reason:
          "not_as_asked: billing_refund moved 6000 of the 12000 amount_cents asked for (order ord_DEMO00000001: 6000, order ord_DEMO00000002: none)",
      });
      expect(outcomeOf(ended("done", TWO, [], [refund("ord_DEMO00000001", 12_000)]), rules)?.kind).toBe("partial");
    });

    it("the exact refund succeeded: one order, or two orders adding up to the amount over several refunds", () => {
      expect(outcomeOf(ended("done", ONE, [], [refund("ord_DEMO00000001", 5000)]), rules)).toEqual({
        kind: "succeeded",
        reason: "",
      });
      const parts = [
        refund("ord_DEMO00000001", 4000),
        refund("ord_DEMO00000001", 2000),
        refund("ord_DEMO00000002", 6000),
      ];
      expect(outcomeOf(ended("done", TWO, [], parts), rules)).toEqual({ kind: "succeeded", reason: "" });
    });

    it("more than asked (which the guards keep from happening) is not succeeded either", () => {
      expect(outcomeOf(ended("done", ONE, [], [refund("ord_DEMO00000001", 6000)]), rules)).toEqual({
        kind: "partial",
        reason:
          "not_as_asked: billing_refund moved 6000, more than the 5000 amount_cents asked for (order ord_DEMO00000001: 6000)",
      });
    });

    it("a short refund is partial however the session ended after it", () => {
      expect(outcomeOf(ended("deadline", ONE, [], [refund("ord_DEMO00000001", 1)]), rules)?.kind).toBe("partial");
    });

    it("a refund task stating no amount succeeded when every order it names was refunded, any amount", () => {
      const task = { kind: "refund", order_ids: ["ord_DEMO00000001", "ord_DEMO00000002"] };
      const both = [refund("ord_DEMO00000001", 1), refund("ord_DEMO00000002", 7)];
      expect(outcomeOf(ended("done", task, [], both), rules)).toEqual({ kind: "succeeded", reason: "" });
      expect(outcomeOf(ended("done", task, [], [refund("ord_DEMO00000001", 1)]), rules)).toEqual({
        kind: "partial",
        reason: "not_as_asked: billing_refund moved 1 (order ord_DEMO00000001: 1, order ord_DEMO00000002: none)",
      });
    });

    it("a refund task stating no amount, answered without a refund ever tried, is not done: the answer is not the refund", () => {
      const task = { kind: "refund", order_id: "ord_DEMO00000001" };
      const answered = ended("done", task, [seen("kb_search_search", envelope("live"))]);
      expect(outcomeOf(answered, rules)).toEqual({ kind: "not_done", reason: "no_effect: billing_refund" });
      // A task of another kind naming the order asks for no refund.
      expect(outcomeOf({ ...answered, task: { kind: "question", order_id: "ord_DEMO00000001" } }, rules)).toEqual({
        kind: "succeeded",
        reason: "",
      });
    });
  });

  it("a question answered live or from the cache succeeded; on a degraded answer or a passing failure it is partial", () => {
    expect(outcomeOf(ended("done", {}, [seen("kb_search_search", envelope("live"))]), rules)).toEqual({
      kind: "succeeded",
      reason: "",
    });
    expect(outcomeOf(ended("done", {}, [seen("kb_search_search", envelope("cache"))]), rules)).toEqual({
      kind: "succeeded",
      reason: "",
    });
    expect(outcomeOf(ended("done", {}, [seen("kb_search_search", envelope("degraded"))]), rules)).toEqual({
      kind: "partial",
      reason: "degraded: kb_search_search",
    });
    expect(
      outcomeOf(ended("done", {}, [seen("risk_query_risk", envelope("none", "DEADLINE_EXCEEDED"))]), rules),
    ).toEqual({ kind: "partial", reason: "tool_failed: risk_query_risk" });
    expect(outcomeOf(ended("done", {}, [seen("billing_get_order", envelope("none", "NOT_FOUND"))]), rules)).toEqual({
      kind: "succeeded",
      reason: "",
    });
  });

  it.each(["INTERNAL", "UNKNOWN", "DATA_LOSS", "UNIMPLEMENTED"])(
    "a question answered after its tool failed with its own fault (%s) is partial, as after a passing failure: no data of the tool's stands behind it",
    (code) => {
      expect(outcomeOf(ended("done", {}, [seen("kb_search_search", envelope("none", code))]), rules)).toEqual({
        kind: "partial",
        reason: "tool_failed: kb_search_search",
      });
    },
  );

  it("a task stating no amount whose irreversible call was refused is not done, though the session ended done", () => {
    const task = { kind: "refund", order_id: "ord_DEMO00000007" };
    expect(
      outcomeOf(
        ended("done", task, [
          seen("kb_search_search", envelope("live")),
          seen("billing_refund", envelope("none", "EINVAL")),
        ]),
        rules,
      ),
    ).toEqual({
      kind: "not_done",
      reason: "no_effect: billing_refund",
    });
  });

  it("any other stop is not done, by its stop reason", () => {
    expect(outcomeOf(ended("tool_unavailable", REFUND_TASK, []), rules)).toEqual({
      kind: "not_done",
      reason: "tool_unavailable",
    });
    expect(outcomeOf(ended("approval_denied", REFUND_TASK, []), rules)).toEqual({
      kind: "not_done",
      reason: "approval_denied",
    });
  });

  it("an irreversible call sent and never settled is effect_unknown, whatever else was made: it may have been made", () => {
    const call = { id: "c", tool: "billing_refund", arguments: "{}", argsHash: "h", worldVersion: "" };
    const left = (pending: JsonObject) => ({ ...ended("approval_denied", REFUND_TASK, []), pending }) as SessionRecord;
    const unknown = { kind: "not_done", reason: "effect_unknown: billing_refund" };
    expect(outcomeOf(left({ queue: [], call, unsettled: true } as never), rules)).toEqual(unknown);
    const asked = {
      approvalId: "a",
      tool: "billing_refund",
      argumentsHash: "h",
      worldVersion: "",
      reason: "",
      expiresAt: 1,
    };
    expect(
      outcomeOf(left({ queue: [], call, approval: { ...asked, kind: "outcome_unknown" } } as never), rules),
    ).toEqual(unknown);
    // Waiting on an ordinary approval, nothing was sent: not done, by the stop.
    expect(outcomeOf(left({ queue: [], call, approval: { ...asked, kind: "" } } as never), rules)).toEqual({
      kind: "not_done",
      reason: "approval_denied",
    });
  });

  it("a question answered below the confidence threshold is partial, with the policy's reason; at or above it, or with none stated, it succeeded", () => {
    const answered = (value: number, reason: string) => {
      const s = ended("done", {}, [seen("kb_search_search", envelope("live"))]);
      return { ...s, context: { ...s.context, answerConfidence: { value, reason } } } as SessionRecord;
    };
    expect(outcomeOf(answered(0.2, "no document in the knowledge base matched"), rules, 0.6)).toEqual({
      kind: "partial",
      reason: "low_confidence: confidence 0.2 is below 0.6: no document in the knowledge base matched",
    });
    expect(outcomeOf(answered(0.6, ""), rules, 0.6)).toEqual({ kind: "succeeded", reason: "" });
    expect(outcomeOf(answered(0.2, "unsure"), rules, 0)).toEqual({ kind: "succeeded", reason: "" });
    expect(outcomeOf(ended("done", {}, [seen("kb_search_search", envelope("live"))]), rules, 0.6)).toEqual({
      kind: "succeeded",
      reason: "",
    });
  });

  it("labels the metric low_confidence or not_as_asked without the words after it, and keeps other reasons", () => {
    expect(reasonLabel("low_confidence: confidence 0.2 is below 0.6: anything the model wrote")).toBe("low_confidence");
    expect(reasonLabel("degraded: kb_search_search")).toBe("degraded: kb_search_search");
    expect(
      reasonLabel("not_as_asked: billing_refund moved 1 of the 5000 amount_cents asked for (order ord_X: 1)"),
    ).toBe("not_as_asked");
  });

  it("a refund made is judged by the refund, not by the answer's confidence (nothing would undo it)", () => {
    const s = ended("done", REFUND_TASK, [], [{ tool: "billing_refund" }]);
    const unsure = {
      ...s,
      context: { ...s.context, answerConfidence: { value: 0.1, reason: "unsure" } },
    } as SessionRecord;
    expect(outcomeOf(unsure, rules, 0.6)).toEqual({ kind: "succeeded", reason: "" });
  });

  it("a refund made before the budget ran out (or a cancel) is still what the user asked for", () => {
    expect(outcomeOf(ended("deadline", REFUND_TASK, [], [{ tool: "billing_refund" }]), rules)).toEqual({
      kind: "succeeded",
      reason: "",
    });
  });
});
