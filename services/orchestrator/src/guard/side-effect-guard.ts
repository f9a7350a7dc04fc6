// Before an irreversible call, the host — not the model — decides whether it may happen: only on
// an entity the task names; with the entity's state and its customer's risk read live by the host
// itself (never from the model's history, never from a cache); its amount added to what the
// entity's ledger says was moved and to what every session holds or made for the entity, the
// customer and this session, in the entity's currency (effect-reservations.ts), against the
// thresholds of that currency and the task's own figure (money-totals.ts); anything the host cannot
// establish goes to a human, never silently through. The request then carries the bound the host
// decided on, which the tool enforces too. The same rules hold whatever policy drives the session,
// because they run here.
import { setTimeout as sleep } from "node:timers/promises";
import type { WaitFor } from "../session/park-rules.js";
import { type ApprovalRules, thresholdOf, thresholdsIn } from "./approvals.js";
import { deadlineOf } from "./budget.js";
import { belowThreshold, type StatedConfidence } from "./confidence.js";
import { SINGLE_CALL_POLICY } from "../policies/single-call-policy.js";
import type { Reservation } from "../store/effect-reservations.js";
import { decideMoney } from "./money-totals.js";
import type { ResultEnvelope } from "../policies/policy.js";
import { afterRead, type LiveReadDeps, readLive, refuseReads } from "./live-reads.js";
import { type EffectRecord, effectsOf, type PlannedReservation } from "../session/data.js";
import { declaredEntities, type GuardedEffect, type SideEffectRules, taskFigure, valueAt } from "./side-effects.js";
import type { StopReason } from "../session/session-state.js";
import type { JsonObject, JsonValue, SessionRecord, SessionStore } from "../store/session-store.js";
import { dryFieldsOf } from "../tool-registry.js";

export interface GuardDeps extends LiveReadDeps {
  readonly rules: SideEffectRules;
  readonly approvals: ApprovalRules;
  readonly store: SessionStore;
}

/** What the call will do, as the host decided it: the effect, the amount it reserves (money), and the request with the host's bound in it. */
export interface Planned {
  readonly worldVersion: string;
  readonly effect: EffectRecord;
  readonly reservation: PlannedReservation | undefined;
  readonly args: JsonObject;
}

export type GuardVerdict =
  /** Not allowed: an EPRECOND observation, and no call. */
  | { readonly kind: "refuse"; readonly message: string; readonly suggestedAction: string; readonly retryable: boolean }
  | { readonly kind: "stop"; readonly reason: StopReason; readonly answer: string }
  /** A live read failed for a reason that passes: wait for its tool rather than decide without it. */
  | ({ readonly kind: "park" } & WaitFor)
  | ({ readonly kind: "approve"; readonly why: string } & Planned)
  | ({ readonly kind: "start" } & Planned);

/** How long past its SLA timeout a call in flight on the entity is waited for before a human is shown the totals, and how often the store is asked. */
const HELD_SETTLE_MARGIN_MS = 500;
const HELD_POLL_MS = 50;

const num = (v: JsonValue | undefined): number =>
  typeof v === "number" ? v : typeof v === "string" && v !== "" ? Number(v) : 0;

/** The world version an approval is bound to: "<entity>:<id>@<version>". */
export function worldVersionOf(guard: GuardedEffect, id: string, data: JsonValue): string {
  return `${guard.entity}:${id}@${String(valueAt(data, guard.reader!.version!) ?? "0")}`;
}

/** The customer's risk, as a reason for a human, or undefined when each value its contract gates is below its threshold; a read that failed for a reason that passes, to wait for. */
async function riskReason(
  deps: GuardDeps,
  s: SessionRecord,
  guard: GuardedEffect,
  entityId: string,
  customerId: string,
): Promise<string | undefined | WaitFor> {
  const risk = guard.risk!;
  if (customerId === "")
    return `${guard.entity} ${entityId} names no ${risk.reader.entity}, so its risk cannot be checked`;
  const read = await readLive(deps, s, risk.reader, customerId);
  const score = read.ok ? valueAt(read.data, risk.reader.riskScore!) : undefined;
  if (!read.ok && read.passing) return read.passing;
  if (!read.ok) return `the ${risk.reader.entity}'s risk could not be read (${read.why})`;
  if (score === -1) return `the ${risk.reader.entity}'s risk score could not be computed`;
  for (const gate of risk.reader.approvals) {
    const value = num(valueAt(read.data, gate.path));
    const threshold = thresholdOf(deps.approvals, gate.approval);
    if (value >= threshold) return `${risk.reader.entity} ${gate.words} ${value} is at or above ${threshold}`;
  }
  return undefined;
}

/**
 * What a dry-run session's own earlier calls of this tool would have moved, on `entityId` and in
 * all: none of it reaches the ledger or any total (a dry run lets its hold go), yet a later call of
 * the run must be judged as the live session would judge it after them: the same approvals, the
 * same refusals. Zero for a live session.
 */
function rehearsedBy(s: SessionRecord, guard: GuardedEffect, entityId: string): { entity: number; session: number } {
  if (dryFieldsOf(guard.tool, s.task).length === 0) return { entity: 0, session: 0 };
  const mine = effectsOf(s).filter((e) => e.tool === guard.tool.name);
  const sum = (effects: readonly EffectRecord[]) => effects.reduce((total, e) => total + e.amount, 0);
  return { entity: sum(mine.filter((e) => e.entityId === entityId)), session: sum(mine) };
}

/**
 * What the host decides about one irreversible call, before anything is written. `key` is the
 * call's idempotency key: an effect this session already made with the same key is a replay —
 * the same request again, which moves nothing new — and passes without the money checks.
 */
export async function guardSideEffect(
  deps: GuardDeps,
  s: SessionRecord,
  guard: GuardedEffect,
  args: JsonObject,
  key: string,
  confidence: StatedConfidence | undefined,
  waitedForHeld = false,
): Promise<GuardVerdict> {
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
      reason: "deadline",
      answer: `stopped before calling ${tool.name}: ${Math.max(0, remaining)} ms of the session's wall clock left, less than its ${tool.timeoutMs} ms SLA timeout; nothing was done`,
    };
  }
  const amount = guard.amountField ? num(args[guard.amountField]) : 0;
  const effect: EffectRecord = { key, tool: tool.name, entity: guard.entity, entityId, amount };
  const made = effectsOf(s).find((e) => e.key === key);
  if (made)
    return {
      kind: "start",
      worldVersion: "",
      effect: made,
      reservation: undefined,
      args: withBound(guard, args, made.bound),
    };
  const low = belowThreshold(confidence, deps.approvals.minConfidence);
  // A call forwarded from an MCP client was judged by no policy at all: a person other than the
  // caller decides every irreversible one, whatever the amount, risk or confidence threshold.
  const forwarded =
    s.policy === SINGLE_CALL_POLICY
      ? `${tool.name} was asked for directly by an MCP client; another person decides every irreversible call`
      : undefined;
  const asks = [...(low ? [`policy ${low}`] : []), ...(forwarded ? [forwarded] : [])];
  if (!guard.movesMoney || !guard.reader || !guard.risk) {
    const planned = { worldVersion: "", effect, reservation: undefined, args };
    return asks.length > 0 ? { kind: "approve", why: asks.join("; "), ...planned } : { kind: "start", ...planned };
  }

  const noRoom = refuseReads(s, guard, deps.now());
  if (noRoom) return { kind: "stop", ...noRoom };
  const entity = await readLive(deps, s, guard.reader, entityId);
  if (!entity.ok && entity.passing) return { kind: "park", ...entity.passing };
  if (!entity.ok) {
    return {
      kind: "refuse",
      message: `the host could not read ${guard.entity} ${entityId} live before ${tool.name} (${entity.why}); it does not act without it`,
      suggestedAction: "try again later, or answer that it could not be done now",
      retryable: true,
    };
  }
  // A dry run's earlier calls moved nothing, but the run decides as the live one would after them.
  const rehearsed = rehearsedBy(s, guard, entityId);
  const available = num(valueAt(entity.data, guard.reader.available!)) - rehearsed.entity;
  const moved = num(valueAt(entity.data, guard.reader.moved!)) + rehearsed.entity;
  if (amount > available) {
    return {
      kind: "refuse",
      message: `${tool.name} of ${amount} on ${guard.entity} ${entityId}: only ${available} may still be moved (already moved: ${moved})`,
      suggestedAction: "explain in the answer why it cannot be done",
      retryable: false,
    };
  }
  const currency = String(valueAt(entity.data, guard.reader.currency!) ?? "");
  const linked = valueAt(entity.data, guard.risk.link);
  const customerId = typeof linked === "string" ? linked : "";
  const reservation: Reservation = {
    key,
    sessionId: s.id,
    tool: tool.name,
    entity: guard.entity,
    entityId,
    customerId,
    currency,
    amount,
  };
  const now = deps.now();
  const customerSince = now - deps.approvals.customerWindowMs;
  const stored = await deps.store.otherEffects(reservation, customerSince);
  const others = {
    ...stored,
    // The entity's are its customer's too; the customer of another entity is not known here.
    customer: stored.customer + rehearsed.entity,
    session: stored.session + rehearsed.session,
    sessionAnyCurrency: stored.sessionAnyCurrency + rehearsed.session,
  };
  const thresholds = thresholdsIn(deps.approvals, currency);
  const money = decideMoney({
    reservation,
    moved,
    others,
    thresholds,
    customerSince,
    customerWindowMs: deps.approvals.customerWindowMs,
    task: guard.amountTaskField
      ? { field: guard.amountTaskField, figure: taskFigure(s.task, guard.amountTaskField) }
      : undefined,
  });
  // A human would be shown the entity's total while other calls on it are in flight: one that
  // already reached the ledger is counted twice (moved, and still held) until its outcome is
  // recorded. Those calls settle within their SLA; wait for them, then read the entity again, so
  // the figures shown are the ones that stand.
  if (!waitedForHeld && others.entityHeld > 0 && money.totals.entity > thresholds.entity) {
    const heldUntil = deps.now() + tool.timeoutMs + HELD_SETTLE_MARGIN_MS;
    while (deps.now() < heldUntil && (await deps.store.otherEffects(reservation, customerSince)).entityHeld > 0)
      await sleep(HELD_POLL_MS);
    // The entity read again with the budget its first read left.
    return guardSideEffect(deps, afterRead(s, entity), guard, args, key, confidence, true);
  }
  // The risk read draws on the retries the entity's read left.
  const risk = await riskReason(deps, afterRead(s, entity), guard, entityId, customerId);
  if (typeof risk === "object") return { kind: "park", ...risk };
  const reasons = [...money.reasons, ...(risk ? [risk] : []), ...asks];
  const bound = money.limits.entityMax;
  const planned: Planned = {
    worldVersion: worldVersionOf(guard, entityId, entity.data),
    effect: { ...effect, bound },
    reservation: { customerId, currency, limits: money.limits },
    args: withBound(guard, args, bound),
  };
  return reasons.length > 0 ? { kind: "approve", why: reasons.join("; "), ...planned } : { kind: "start", ...planned };
}

/** The request with the host's bound in its bound field (an int64, as protobuf JSON writes one). */
function withBound(guard: GuardedEffect, args: JsonObject, bound: number | undefined): JsonObject {
  return guard.boundField && bound !== undefined ? { ...args, [guard.boundField]: String(bound) } : args;
}

/** An EPRECOND observation of a refused side effect. */
export function refusal(
  verdict: { readonly message: string; readonly suggestedAction: string; readonly retryable: boolean },
  now: number,
): ResultEnvelope {
  return {
    ok: false,
    error: {
      code: "EPRECOND",
      message: verdict.message,
      retryable: verdict.retryable,
      suggestedAction: verdict.suggestedAction,
    },
    refs: [],
    costMicros: 0,
    servedFrom: "none",
    observedAt: new Date(now).toISOString(),
  };
}
