// Before an irreversible call, the host — not the model — decides whether it may happen: only on
// an entity the task names; with the entity's state and its customer's risk read live by the host
// itself (never from the model's history, never from a cache); amounts counted cumulatively per
// entity (what the ledger says was already moved, across every session) and per session; anything
// the host cannot establish goes to a human, never silently through. The same rules hold whatever
// policy drives the session, because they run here.
import type { DescService } from "@bufbuild/protobuf";
import { toJson } from "@bufbuild/protobuf";
import type { ToolCallError, ToolClient } from "@loopguard/tool-sdk";
import type { ApprovalRules } from "./approvals.js";
import { deadlineOf } from "./budget.js";
import type { ResultEnvelope } from "./policy.js";
import { redactText } from "./redact.js";
import { type EffectRecord, effectsOf } from "./session/data.js";
import { declaredEntities, type EntityReader, type GuardedEffect, type SideEffectRules, valueAt } from "./side-effects.js";
import type { JsonObject, JsonValue, SessionRecord } from "./session-store.js";
import type { ToolTokens } from "./tool-tokens.js";

export interface GuardDeps {
  readonly rules: SideEffectRules;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly tokens: ToolTokens;
  readonly approvals: ApprovalRules;
  readonly now: () => number;
}

export type GuardVerdict =
  /** Not allowed: an EPRECOND observation, and no call. */
  | { readonly kind: "refuse"; readonly message: string; readonly suggestedAction: string; readonly retryable: boolean }
  | { readonly kind: "stop"; readonly answer: string }
  | { readonly kind: "approve"; readonly why: string; readonly worldVersion: string; readonly effect: EffectRecord }
  | { readonly kind: "start"; readonly worldVersion: string; readonly effect: EffectRecord };

/** A live read the host makes for its own checks: the read's own token and deadline, and no cached or degraded answer. */
export async function readLive(deps: GuardDeps, s: SessionRecord, reader: EntityReader, id: string): Promise<{ ok: true; data: JsonValue } | { ok: false; why: string }> {
  const tool = reader.tool;
  if (tool.requiredScope && !s.scopes.includes(tool.requiredScope)) return { ok: false, why: `the session is not granted ${tool.requiredScope}, which ${tool.name} needs` };
  const client = deps.clients.get(tool.tool);
  if (!client) return { ok: false, why: `no client for ${tool.tool}` };
  const deadline = Math.min(deps.now() + tool.timeoutMs, deadlineOf(s.usage, s.budget));
  try {
    const token = await deps.tokens.for(s.id, tool, deadline);
    const result = await client.call(tool.method.localName as never, { [reader.idField]: id } as never, { token, deadline: new Date(deadline), fallback: false });
    return { ok: true, data: toJson(tool.method.output, result.response as never) as JsonValue };
  } catch (error) {
    const e = error as ToolCallError;
    return { ok: false, why: `${tool.name} failed: ${e.reason ?? e.code}: ${redactText(e.message)}` };
  }
}

const num = (v: JsonValue | undefined): number => (typeof v === "number" ? v : typeof v === "string" && v !== "" ? Number(v) : 0);

/** The world version an approval is bound to: "<entity>:<id>@<version>". */
export function worldVersionOf(guard: GuardedEffect, id: string, data: JsonValue): string {
  return `${guard.entity}:${id}@${String(valueAt(data, guard.reader!.version!) ?? "0")}`;
}

/**
 * What the host decides about one irreversible call, before anything is written. `key` is the
 * call's idempotency key: an effect this session already made with the same key is a replay and
 * moves nothing new, so it passes without the money checks.
 */
export async function guardSideEffect(deps: GuardDeps, s: SessionRecord, guard: GuardedEffect, args: JsonObject, key: string, confidence: number | undefined): Promise<GuardVerdict> {
  const tool = guard.tool;
  const entityId = String(args[guard.idField] ?? "");
  const declared = declaredEntities(s.task, guard.entity);
  if (!declared.includes(entityId)) {
    return {
      kind: "refuse",
      message: `${tool.name} acts on ${guard.entity} ${entityId}, which the task does not name${declared.length > 0 ? ` (it names ${declared.join(", ")})` : ""}; the host acts only on entities the task declares`,
      suggestedAction: `act only on the ${guard.entity} the task names`,
      retryable: false,
    };
  }
  const remaining = deadlineOf(s.usage, s.budget) - deps.now();
  if (remaining < tool.timeoutMs) {
    return {
      kind: "stop",
      answer: `stopped before calling ${tool.name}: ${Math.max(0, remaining)} ms of the session's wall clock left, less than its ${tool.timeoutMs} ms SLA timeout; nothing was done`,
    };
  }
  const amount = guard.amountField ? num(args[guard.amountField]) : 0;
  const effect: EffectRecord = { key, tool: tool.name, entity: guard.entity, entityId, amount };
  const done = effectsOf(s);
  const lowConfidence = confidence !== undefined && confidence < deps.approvals.minConfidence ? `policy confidence ${confidence} is below ${deps.approvals.minConfidence}` : undefined;
  if (done.some((e) => e.key === key)) return { kind: "start", worldVersion: "", effect };
  if (!guard.movesMoney || !guard.reader || !guard.risk) {
    return lowConfidence ? { kind: "approve", why: lowConfidence, worldVersion: "", effect } : { kind: "start", worldVersion: "", effect };
  }

  const entity = await readLive(deps, s, guard.reader, entityId);
  if (!entity.ok) {
    return {
      kind: "refuse",
      message: `the host could not read ${guard.entity} ${entityId} live before ${tool.name} (${entity.why}); it does not act without it`,
      suggestedAction: "try again later, or answer that it could not be done now",
      retryable: true,
    };
  }
  const available = num(valueAt(entity.data, guard.reader.available!));
  const moved = num(valueAt(entity.data, guard.reader.moved!));
  if (amount > available) {
    return {
      kind: "refuse",
      message: `${tool.name} of ${amount} on ${guard.entity} ${entityId}: only ${available} may still be moved (already moved: ${moved})`,
      suggestedAction: "explain in the answer why it cannot be done",
      retryable: false,
    };
  }
  const worldVersion = worldVersionOf(guard, entityId, entity.data);
  const reasons: string[] = [];
  const entityTotal = moved + amount;
  if (entityTotal > deps.approvals.amountThresholdCents) {
    reasons.push(
      `${guard.entity} ${entityId} would have ${entityTotal} moved in total (${moved} already, across all sessions), above the approval threshold of ${deps.approvals.amountThresholdCents}`,
    );
  }
  const sessionTotal = done.filter((e) => e.amount > 0).reduce((sum, e) => sum + e.amount, 0) + amount;
  if (sessionTotal > deps.approvals.sessionAmountThresholdCents) {
    reasons.push(`this session would move ${sessionTotal} in total, above the per-session approval threshold of ${deps.approvals.sessionAmountThresholdCents}`);
  }
  const customerId = valueAt(entity.data, guard.risk.link);
  if (typeof customerId !== "string" || customerId === "") {
    reasons.push(`${guard.entity} ${entityId} names no ${guard.risk.reader.entity}, so its risk cannot be checked`);
  } else {
    const risk = await readLive(deps, s, guard.risk.reader, customerId);
    const score = risk.ok ? valueAt(risk.data, guard.risk.reader.riskScore!) : undefined;
    if (!risk.ok) reasons.push(`the ${guard.risk.reader.entity}'s risk could not be read (${risk.why})`);
    else if (score === -1) reasons.push(`the ${guard.risk.reader.entity}'s risk score could not be computed`);
    else if (num(score) >= deps.approvals.riskThreshold) reasons.push(`${guard.risk.reader.entity} risk score ${num(score)} is at or above ${deps.approvals.riskThreshold}`);
  }
  if (lowConfidence) reasons.push(lowConfidence);
  return reasons.length > 0 ? { kind: "approve", why: reasons.join("; "), worldVersion, effect } : { kind: "start", worldVersion, effect };
}

/** An EPRECOND observation of a refused side effect. */
export function refusal(verdict: Extract<GuardVerdict, { kind: "refuse" }>, now: number): ResultEnvelope {
  return {
    ok: false,
    error: { code: "EPRECOND", message: verdict.message, retryable: verdict.retryable, suggestedAction: verdict.suggestedAction },
    refs: [],
    costMicros: 0,
    servedFrom: "none",
    observedAt: new Date(now).toISOString(),
  };
}
