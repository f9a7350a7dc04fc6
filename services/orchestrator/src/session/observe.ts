// Observation: a tool's result (or the host's own verdict on a call) goes into the session's
// history (governed to the model's window before the next model call, see prompt.ts),
// fingerprinted for progress, with its step record; then the session thinks again, or stops when
// it makes no progress.
import type { ResultEnvelope, ToolCallRequest } from "../policies/policy.js";
import { withRetries, withSpend } from "../guard/budget.js";
import { fingerprint, isStuck, NO_PROGRESS_WINDOW } from "../guard/progress.js";
import { redactText } from "../guard/redact.js";
import type { SessionRecord } from "../store/session-store.js";
import {
  contextJson,
  contextOf,
  effectsOf,
  envelopeJson,
  type Pending,
  pendingOf,
  queueLeft,
  redactedEnvelope,
} from "./data.js";
import type { Kit } from "./kit.js";
import type { Via } from "./moves.js";

/**
 * Appends the observation in `pending` to the history and moves on to THINKING (or stops on no
 * progress). `s` is OBSERVING with the result in `pending`, or is still TOOL_EXECUTING and passes
 * `via` OBSERVING in the same transition.
 */
export async function observe(
  kit: Kit,
  s: SessionRecord,
  pending: Pending = pendingOf(s),
  via: readonly Via[] = [],
): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const call = pending.call;
  const envelope = pending.envelope;
  if (!call || !envelope)
    return moves.stop(s, "unrecoverable_error", "an observation was expected but none was recorded");
  const ctx = contextOf(s);
  const clean = redactedEnvelope(envelope);
  const durationMs = pending.durationMs ?? 0;
  const history = [
    ...ctx.history,
    {
      kind: "observation" as const,
      callId: call.id,
      tool: call.tool,
      envelope: clean,
      latencyMs: Math.round(durationMs),
    },
  ];
  const outcome = envelope.ok ? JSON.stringify(envelope.data ?? null) : (envelope.error?.code ?? "error");
  const print = fingerprint(call.tool, call.arguments, outcome, envelope.refs);
  const fingerprints = [...ctx.fingerprints, print].slice(-10);
  const step = ctx.traceSteps + 1;
  // The call's price; should the session have ended while the answer came, it is charged to it (see
  // MoveOptions). Should a store outage lose the move, the call is re-issued and paid for then.
  const spend = { tokens: 0, costMicros: envelope.costMicros };
  const paid = { spend, spendReissued: true };
  // Every attempt past the first (retries, hedges) spends the session's retry budget.
  const usage = withSpend(withRetries(s.usage, Math.max(0, (pending.attempt ?? 1) - 1)), spend);
  const record = kit.spans.step(s, {
    step,
    before: "TOOL_EXECUTING",
    after: "OBSERVING",
    decision: {
      kind: "tool_call",
      id: call.id,
      name: call.tool,
      arguments: call.arguments,
      served_from: envelope.servedFrom,
    },
    result: envelopeJson(clean),
    fingerprint: print,
    durationMs,
    attempt: pending.attempt ?? 1,
  });
  const effects = effectsOf(s);
  const context = contextJson({
    ...ctx,
    history,
    fingerprints,
    traceSteps: step,
    // A side effect observed done is counted in the session's totals and known as made (a later
    // call with the same key is its replay); a failed one was not made.
    ...(call.effect && envelope.ok && !effects.some((e) => e.key === call.effect!.key)
      ? { effects: [...effects, call.effect] }
      : {}),
  });
  deps.onStep?.(s, call.tool, envelope);
  // An outcome the tool gave (a success, or a failure that is certain): what was held becomes the ledger's figure, or is let go.
  // A dry run moved nothing: what it held is let go, so no total (the customer's, across sessions) counts it.
  const made = envelope.ok && !isDryRun(kit, call);
  const money = call.effect
    ? { money: { settle: call.effect.key, outcome: made ? ("settled" as const) : ("released" as const) } }
    : {};
  if (isStuck(fingerprints)) {
    return moves.stop(
      s,
      "no_progress",
      `no progress: the same call to ${call.tool} gave the same result ${NO_PROGRESS_WINDOW} times`,
      { patch: { usage, context }, step: record, via, ...paid, ...money },
    );
  }
  return moves.move(s, "THINKING", {
    audit: {
      reason: `observed ${call.tool}`,
      tool: call.tool,
      outcome: envelope.ok ? "ok" : (envelope.error?.code ?? "error"),
    },
    patch: { usage, context, pending: queueLeft(pending.queue) },
    step: record,
    via,
    ...paid,
    ...money,
  });
}

/** Whether the call was sent as a dry run (a FIELD_ROLE_DRY_RUN field of its request set by the host). */
function isDryRun(kit: Kit, call: { readonly tool: string; readonly arguments: string }): boolean {
  const fields = kit.deps.registry.get(call.tool)?.dryRunFields ?? [];
  if (fields.length === 0) return false;
  const request = JSON.parse(call.arguments) as Record<string, unknown>;
  return fields.some((f) => request[f.field] === true);
}

/** Records an observation that needed no tool call (EINVAL, ENOTOOL …) and goes on thinking. */
export async function observeInPlace(
  kit: Kit,
  s: SessionRecord,
  call: ToolCallRequest,
  rest: Pending["queue"],
  envelope: ResultEnvelope,
  reason: string,
): Promise<SessionRecord> {
  const ctx = contextOf(s);
  // The model wrote the name too: an unknown tool's name is stored like its arguments.
  const name = redactText(call.name);
  const history = [
    ...ctx.history,
    { kind: "call" as const, callId: call.id, tool: name, arguments: redactText(call.arguments) },
    { kind: "observation" as const, callId: call.id, tool: name, envelope },
  ];
  const step = ctx.traceSteps + 1;
  const record = kit.spans.step(s, {
    step,
    before: s.state,
    after: s.state,
    decision: { kind: "tool_call", id: call.id, name: call.name, arguments: call.arguments },
    result: envelopeJson(envelope),
    durationMs: 0,
  });
  return kit.moves.move(s, "THINKING", {
    audit: { reason, tool: name, outcome: envelope.error?.code ?? "ok" },
    patch: { context: contextJson({ ...ctx, history, traceSteps: step }), pending: queueLeft(rest) },
    step: record,
  });
}
