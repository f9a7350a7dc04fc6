// The live reads the host makes for its own checks before an irreversible call (the entity's
// state, its customer's risk): each is a tool call of the session, with the read's own token and
// deadline and no cached or degraded answer, charged to the session once it went out, so the
// budgets the session runs under count every call made on its behalf.
import type { DescService } from "@bufbuild/protobuf";
import { toJson } from "@bufbuild/protobuf";
import { CallError, type ToolClient } from "@loopguard/tool-sdk";
import { failureName, passes, type WaitFor } from "../session/park-rules.js";
import type { StopReason } from "../session/session-state.js";
import type { JsonValue, SessionRecord, Spend } from "../store/session-store.js";
import { callDeadline, deadlineOf, refuseToolCall, retriesLeft, withRetries, withSpend } from "./budget.js";
import { redactText } from "./redact.js";
import type { EntityReader, GuardedEffect } from "./side-effects.js";
import type { ToolTokens } from "./tool-tokens.js";

export interface LiveReadDeps {
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly tokens: ToolTokens;
  readonly now: () => number;
  /** Charges the session a live read the host sent, its attempts past the first as retries with it, as it is made (SessionMoves.charge). */
  readonly charge: (s: SessionRecord, spend: Spend) => Promise<void>;
}

/**
 * A live read the host makes for its own checks: the read's own token and deadline, and no cached or degraded answer.
 * `passing`: the read failed for a reason that passes, and this is the tool to wait for. `charged`: what the session
 * was charged for it (none when nothing went out), for a read after it in the same pass to count (see afterRead).
 */
export type LiveRead = ({ ok: true; data: JsonValue } | { ok: false; why: string; passing?: WaitFor }) & {
  readonly charged?: Spend;
};

/** What one live read costs the session: a tool call of the reader, at its price. */
export const readSpend = (reader: EntityReader): Spend => ({
  tokens: 0,
  costMicros: reader.tool.costMicros,
  toolCalls: 1,
});

/**
 * Reads an entity live. A read the host sends is a call of the session like any other: charged to
 * it once it went out, whatever came of it (an answer, a failure, a timeout), as one tool call at
 * the reader's price however many attempts it took; each attempt past the first (a retry, a hedge)
 * is a retry of the session's, drawn from its retry budget, as a model-requested call's are, and
 * charged with the call in one write (so a session that ends before it moves again counts it). One
 * refused before anything went out (no scope, no client, or by the tool client itself: an open
 * breaker, a full bulkhead, a deadline already past) costs nothing.
 */
export async function readLive(
  deps: LiveReadDeps,
  s: SessionRecord,
  reader: EntityReader,
  id: string,
): Promise<LiveRead> {
  const tool = reader.tool;
  if (tool.requiredScope && !s.scopes.includes(tool.requiredScope))
    return { ok: false, why: `the session is not granted ${tool.requiredScope}, which ${tool.name} needs` };
  const client = deps.clients.get(tool.tool);
  if (!client) return { ok: false, why: `no client for ${tool.tool}` };
  const deadline = callDeadline(tool.timeoutMs, deadlineOf(s.usage, s.budget), deps.now());
  let attempts = 0;
  let read: LiveRead;
  try {
    const token = await deps.tokens.for(s.id, tool, deadline);
    const result = await client.call(tool.method.localName as never, { [reader.idField]: id } as never, {
      token,
      deadline: new Date(deadline),
      fallback: false,
      maxExtraAttempts: retriesLeft(s.usage, s.budget),
    });
    attempts = result.attempts;
    read = { ok: true, data: toJson(tool.method.output, result.response as never) as JsonValue };
  } catch (error) {
    if (error instanceof CallError) attempts = error.attempts;
    const e = error as CallError;
    const why = `${tool.name} failed: ${e.reason ?? e.code}: ${redactText(e.message)}`;
    read = {
      ok: false,
      why,
      ...(passes(e)
        ? { passing: { tool, reason: `live read failed: ${failureName(e)}`, retryAfterMs: e.retryAfterMs } }
        : {}),
    };
  }
  if (attempts === 0) return read;
  // Its retries are within what the budget had left: the client sent at most that many attempts past the first.
  const charged: Spend = { ...readSpend(reader), retries: attempts - 1 };
  await deps.charge(s, charged);
  return { ...read, charged };
}

/** `s` as a read after `read` in the same pass must see it: with what `read` was charged (its call, price and retries). */
export function afterRead(s: SessionRecord, read: LiveRead): SessionRecord {
  const { charged } = read;
  return charged ? { ...s, usage: withRetries(withSpend(s.usage, charged), charged.retries ?? 0) } : s;
}

/**
 * Why the session stops before the live reads of a money call (both, or the entity's again when an
 * approval is answered or the approved call is sent): its budgets cannot hold them and the call
 * itself (each read is charged: see readLive; an approved call's count was charged by its
 * approval, `callCounted`); undefined when they can.
 */
export function refuseReads(
  s: SessionRecord,
  guard: GuardedEffect,
  now: number,
  readers: readonly EntityReader[] = [guard.reader!, guard.risk!.reader],
  callCounted = false,
): { readonly reason: StopReason; readonly answer: string } | undefined {
  const calls = readers.length + (callCounted ? 0 : 1);
  const cost = readers.reduce((sum, r) => sum + r.tool.costMicros, guard.tool.costMicros);
  const refused = refuseToolCall(s.usage, s.budget, cost, now, calls);
  if (!refused) return undefined;
  const { usage, budget } = s;
  // A session out of tokens has nothing left to read with, whatever the reads cost.
  const why =
    refused === "max_tokens"
      ? `${usage.tokens} of the session's ${budget.maxTokens} tokens are used`
      : `the host reads ${readers.map((r) => r.tool.name).join(" and ")} live before it, and with the call that is ${calls} tool calls costing ${cost} micro-units, more than the session has left (${usage.toolCalls} of ${budget.maxToolCalls} tool calls and ${usage.costMicros} of ${budget.maxCostMicros} micro-units used)`;
  return {
    reason: refused,
    answer: `stopped before calling ${guard.tool.name}: ${refused.replace(/_/g, " ")} reached: ${why}; nothing was executed`,
  };
}
