// The offline default policy: a deterministic planner for the reference tasks. It only decides
// from the goal, the task and the observations so far; the host checks and executes.
//   refund:   kb policy lookup → GetOrder → QueryRisk (when the task names the customer) →
//             Refund → an answer citing the policy document and the refund id
//   question: kb search for the goal, then one per subgoal in the task (`subgoals: [...]`) → an
//             answer citing the documents found
// Its confidence, with the refund call and every answer, is derived from what it observed
// (scripted-confidence.ts).
import { createHash } from "node:crypto";
import {
  ageInWords,
  type Decision,
  type HistoryItem,
  type Policy,
  type PolicyInput,
  type ResultEnvelope,
} from "./policy.js";
import type { JsonObject, JsonValue } from "../store/session-store.js";
import { estimateTokens } from "../guard/budget.js";
import { hashHistory, historyJsonLength } from "../api/history-json.js";
import { type Derived, questionConfidence, refundConfidence } from "./scripted-confidence.js";

function lastObservation(history: readonly HistoryItem[], tool: string): ResultEnvelope | undefined {
  for (let i = history.length - 1; i >= 0; i -= 1) {
    const item = history[i]!;
    if (item.kind === "observation" && item.tool === tool) return item.envelope;
  }
  return undefined;
}

function field(value: JsonValue | undefined, ...path: string[]): JsonValue | undefined {
  let current = value;
  for (const key of path) {
    if (!current || typeof current !== "object" || Array.isArray(current)) return undefined;
    current = (current as JsonObject)[key];
  }
  return current;
}

function text(value: JsonValue | undefined): string {
  return typeof value === "string" ? value : typeof value === "number" ? String(value) : "";
}

interface Hit {
  readonly docId: string;
  readonly version: number;
  readonly title: string;
}

function hitsOf(envelope: ResultEnvelope | undefined): Hit[] {
  const hits = field(envelope?.data, "hits");
  if (!Array.isArray(hits)) return [];
  return hits.map((h) => ({
    docId: text(field(h, "docId")),
    version: Number(field(h, "version") ?? 1),
    title: text(field(h, "title")),
  }));
}

/** A question task's `subgoals`: further questions, each searched after the goal. */
function subgoalsOf(task: JsonObject): string[] {
  const subgoals = task.subgoals;
  return Array.isArray(subgoals)
    ? subgoals.filter((g): g is string => typeof g === "string" && g.trim().length > 0)
    : [];
}

function cite(hit: Hit): string {
  return `[${hit.docId}@${hit.version}]`;
}

/** What the answer says of fallback answers: how old a cached one is, and that a degraded one found nothing because the tool was down. */
function provenance(searches: readonly ResultEnvelope[], hits: number): string {
  const ages = searches.filter((s) => s.servedFrom === "cache").map((s) => s.ageMs ?? 0);
  const parts =
    ages.length > 0
      ? [
          `as of ${ageInWords(Math.max(...ages))} ago: the knowledge base is unavailable now and this is its last answer`,
        ]
      : [];
  const down = searches.filter((s) => s.servedFrom === "degraded").length;
  if (down > 0 && hits > 0)
    parts.push(`${down} of ${searches.length} searches could not be made: the knowledge base was unavailable`);
  return parts.length > 0 ? ` (${parts.join("; ")})` : "";
}

function failure(envelope: ResultEnvelope): string {
  return `${envelope.error?.code ?? "ERROR"}: ${envelope.error?.message ?? "unknown error"}`;
}

export class ScriptedPolicy implements Policy {
  readonly name = "scripted";

  async decide(input: PolicyInput): Promise<Decision> {
    // The prompt is JSON.stringify({ goal, task, history }); its hash and size are computed from
    // the history items' cached texts instead of serialising the whole history again.
    const head = JSON.stringify({ goal: input.goal, task: input.task, history: [] });
    const promptHash = hashHistory(createHash("sha256").update(head.slice(0, -"[]}".length)), input.history)
      .update("}")
      .digest("hex");
    // The host's count of the prompt (the model's tokenizer over the messages it would send) when given;
    // the reply's estimated from its length, as an endpoint reports what it wrote.
    const prompt = input.promptTokens ?? estimateTokens(head.length - "[]".length + historyJsonLength(input.history));
    const usageOf = (reply: string) => ({ input: prompt, output: estimateTokens(reply) });
    const call = (name: string, args: Record<string, unknown>, sure?: Derived): Decision => {
      const json = JSON.stringify(args);
      return {
        kind: "tool_calls",
        calls: [{ id: `call_${input.step}_0`, name, arguments: json }],
        usage: usageOf(`${name}${json}`),
        ...(sure ? { confidence: sure.confidence, uncertaintyReason: sure.uncertaintyReason } : {}),
        promptHash,
      };
    };
    const final = (answer: string, sure: Derived): Decision => ({
      kind: "final",
      answer,
      confidence: sure.confidence,
      uncertaintyReason: sure.uncertaintyReason,
      usage: usageOf(answer),
      promptHash,
    });

    if (input.task.kind === "refund") return this.#refund(input, call, final);

    // One search for the goal, then one per subgoal of the task, then an answer citing them all.
    const queries = [input.goal, ...subgoalsOf(input.task)];
    const searches = input.history
      .filter((h) => h.kind === "observation" && h.tool === "kb_search_search")
      .map((h) => (h as { envelope: ResultEnvelope }).envelope);
    const next = queries[searches.length];
    if (next !== undefined) return call("kb_search_search", { query: next.slice(0, 512), limit: 3 });
    const hits = [...new Map(searches.flatMap(hitsOf).map((h) => [h.docId, h])).values()];
    const sure = questionConfidence(searches, hits.length);
    if (hits.length === 0) {
      if (searches.some((s) => s.servedFrom === "degraded")) {
        return final(
          "The knowledge base was unavailable, so it could not be searched; this says nothing about whether it holds an answer. Please ask again later.",
          sure,
        );
      }
      const failed = searches.find((s) => !s.ok);
      return final(`I could not find an answer in the knowledge base${failed ? ` (${failure(failed)})` : ""}.`, sure);
    }
    return final(
      `From the knowledge base${provenance(searches, hits.length)}: ${hits.map((h) => `${h.title} ${cite(h)}`).join("; ")}.`,
      sure,
    );
  }

  #refund(
    input: PolicyInput,
    call: (name: string, args: Record<string, unknown>, sure?: Derived) => Decision,
    final: (answer: string, sure: Derived) => Decision,
  ): Decision {
    const task = input.task;
    const orderId = text(task.order_id);
    const amountCents = Number(task.amount_cents);
    const reason = text(task.reason) || "CUSTOMER_REQUEST";
    const policyDoc = lastObservation(input.history, "kb_search_search");
    if (!policyDoc) return call("kb_search_search", { query: "refund policy", limit: 3 });
    const sure = refundConfidence(input.history, hitsOf(policyDoc).length);
    const order = lastObservation(input.history, "billing_get_order");
    if (!order) return call("billing_get_order", { orderId });
    if (!order.ok) return final(`I could not look up order ${orderId} (${failure(order)}); no refund was made.`, sure);
    const status = text(field(order.data, "order", "status"));
    const refundable = Number(text(field(order.data, "order", "refundableCents")) || 0);
    if (status !== "ORDER_STATUS_PAID" || refundable < amountCents) {
      return final(
        `Order ${orderId} cannot be refunded ${amountCents} cents (status ${status}, refundable ${refundable} cents); no refund was made.`,
        sure,
      );
    }
    if ((task.id_card || task.phone) && !lastObservation(input.history, "risk_query_risk")) {
      return call("risk_query_risk", { idCard: text(task.id_card), phone: text(task.phone) });
    }
    const refund = lastObservation(input.history, "billing_refund");
    if (!refund) {
      const args = {
        orderId,
        amountCents,
        reason: reason.startsWith("REFUND_REASON_") ? reason : `REFUND_REASON_${reason}`,
      };
      return call("billing_refund", args, sure);
    }
    if (!refund.ok) return final(`The refund of order ${orderId} failed (${failure(refund)}).`, sure);
    const refundId = text(field(refund.data, "refund", "refundId"));
    const doc = hitsOf(policyDoc)[0];
    const basis = doc ? ` under ${doc.title} ${cite(doc)}` : "";
    if (field(refund.data, "dryRun") === true)
      return final(
        `Dry run: ${amountCents} cents of order ${orderId} would be refunded${basis}; nothing was refunded.`,
        sure,
      );
    return final(`Refunded ${amountCents} cents of order ${orderId}${basis}; refund id ${refundId}.`, sure);
  }
}
