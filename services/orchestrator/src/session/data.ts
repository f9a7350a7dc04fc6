// What a session keeps between steps, stored as JSON: its context (history, progress
// fingerprints, trace, effects made) and its pending work (calls queued, the call in flight, an
// approval). Parsed here, once per record the store hands over, into the types the runner uses.
import { Effect } from "@loopguard/tool-sdk";
import { z } from "zod";
import type { MoneyChange } from "../store/effect-reservations.js";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import { pendingApprovalSchema } from "../guard/approvals.js";
import { asRedacted, redact, redactText } from "../guard/redact.js";
import type { JsonObject, JsonValue, SessionRecord } from "../store/session-store.js";
import type { ToolRegistry } from "../tool-registry.js";
import { sessionTraceId } from "./trace-id.js";

/** A tool result's data is JSON the host made itself (from the tool's answer); it is kept, not re-checked. */
const json = z.custom<JsonValue>(() => true);

const envelopeSchema = z.object({
  ok: z.boolean(),
  data: json.optional(),
  error: z
    .object({
      code: z.string(),
      message: z.string(),
      retryable: z.boolean(),
      suggestedAction: z.string(),
      retryAfterMs: z.number().optional(),
    })
    .optional(),
  refs: z.array(z.string()).readonly(),
  costMicros: z.number(),
  servedFrom: z.enum(["live", "cache", "degraded", "none"]),
  observedAt: z.string(),
  ageMs: z.number().optional(),
  note: z.string().optional(),
});

const HISTORY_KINDS: ReadonlySet<unknown> = new Set(["call", "observation", "rejected_answer"]);

/**
 * History items are checked by kind only and kept as the same objects: history-json caches each
 * item's JSON text by identity, so a copy would serialise the whole history again on every step.
 */
const historyItemSchema = z.custom<HistoryItem>(
  (item) => typeof item === "object" && item !== null && HISTORY_KINDS.has((item as { kind?: unknown }).kind),
  "a history item",
);

const effectSchema = z.object({
  key: z.string(),
  tool: z.string(),
  entity: z.string(),
  entityId: z.string(),
  amount: z.number(),
  /** The bound the host put in the request (money effects): a replay of the effect sends the same request. */
  bound: z.number().optional(),
});

const limitsSchema = z.object({
  entityMoved: z.number(),
  entityMax: z.number(),
  customerMax: z.number(),
  customerSince: z.number(),
  sessionMax: z.number(),
  taskMax: z.number().optional(),
});

/** What a money effect reserves when its call is recorded (see effect-reservations.ts). */
const reservationSchema = z.object({ customerId: z.string(), currency: z.string(), limits: limitsSchema });

const contextSchema = z.looseObject({
  history: z.array(historyItemSchema).default([]),
  fingerprints: z.array(z.string()).default([]),
  traceId: z.string().optional(),
  traceSteps: z.number().default(0),
  /** The last prompt's tokens as sent, after compression. */
  contextTokens: z.number().optional(),
  compressions: z.number().optional(),
  /** Tokens compression took out of prompts, summed: the prompt would be contextTokens + savedTokens without it. */
  savedTokens: z.number().optional(),
  /** Prompts that reached 80% of the model's window. */
  contextAlarms: z.number().optional(),
  /** The model's window when the last prompt was governed. */
  contextWindow: z.number().optional(),
  effects: z.array(effectSchema).optional(),
  /** The policy's confidence in the answer it ended with (see confidence.ts). */
  answerConfidence: z.object({ value: z.number(), reason: z.string() }).optional(),
  /** The approval whose expiry ended the session: a late answer naming it is told so (human.ts). */
  expiredApproval: z.object({ approvalId: z.string(), argumentsHash: z.string(), expiresAt: z.number() }).optional(),
  /** Set when the session ends (see outcome.ts). */
  outcome: z.object({ kind: z.enum(["succeeded", "partial", "not_done"]), reason: z.string() }).optional(),
});

/** The confidence of the decision a call came with (confidence.ts), kept with each of its calls. */
const statedFields = { confidence: z.number().optional(), uncertaintyReason: z.string().optional() };

const callRequestSchema = z.object({
  id: z.string(),
  name: z.string(),
  arguments: z.string(),
  argumentsBytes: z.number().optional(),
  ...statedFields,
});

const pendingCallSchema = z.object({
  id: z.string(),
  tool: z.string(),
  arguments: z.string(),
  argsHash: z.string(),
  worldVersion: z.string(),
  ...statedFields,
  /** The effect an irreversible call will make. */
  effect: effectSchema.optional(),
  /** The amount it holds, and the limits it is held to (money effects that are not replays). */
  reservation: reservationSchema.optional(),
});

/** Why and until when a session waits for a tool (PARKED); kept while it retries the same call. */
const parkSchema = z.object({
  /** The tool service's contract name (what its breaker and the wake query know it by). */
  tool: z.string(),
  reason: z.string(),
  wakeAt: z.number(),
  /** When it parked last: a recovery of the tool after this wakes it early. */
  parkedAt: z.number(),
  /** When it first parked for this call. */
  since: z.number(),
  attempts: z.number(),
});

const pendingSchema = z.object({
  queue: z.array(callRequestSchema).default([]),
  call: pendingCallSchema.optional(),
  approval: pendingApprovalSchema.nullish(),
  envelope: envelopeSchema.optional(),
  approvedBy: z.string().optional(),
  /** The queue's confidence as releases before 2026-12-05 stored it, for the whole queue; each call holds its own now. */
  ...statedFields,
  /** The run that sends the call, or APPROVED; any other run's call was interrupted. */
  startedBy: z.string().optional(),
  attempt: z.number().optional(),
  durationMs: z.number().optional(),
  /** An irreversible call was (or may have been) sent and its outcome is not known yet: only the tool's own answer to the same key settles it. */
  unsettled: z.boolean().optional(),
  park: parkSchema.optional(),
});

export type EffectRecord = z.infer<typeof effectSchema>;
export type PlannedReservation = z.infer<typeof reservationSchema>;
export type SessionContext = z.infer<typeof contextSchema> & { readonly traceId: string };
export type PendingCall = z.infer<typeof pendingCallSchema>;
export type Pending = z.infer<typeof pendingSchema>;
export type Park = z.infer<typeof parkSchema>;

/**
 * Typed values by the JSON object they are stored as. A context or pending the runner builds is
 * stored as that same object (contextJson, pendingJson), and the store hands it back in the next
 * record unchanged, so only what a store read from its database is parsed, once.
 */
const contexts = new WeakMap<JsonObject, SessionContext>();
const pendings = new WeakMap<JsonObject, Pending>();

/** The session's context, typed. */
export function contextOf(s: SessionRecord): SessionContext {
  let parsed = contexts.get(s.context);
  if (!parsed) {
    parsed = { ...contextSchema.parse(s.context), traceId: sessionTraceId(s) };
    contexts.set(s.context, parsed);
  }
  return parsed;
}

/** The session's pending work, typed; none is an empty queue. */
export function pendingOf(s: SessionRecord): Pending {
  if (s.pending === null) return { queue: [] };
  let parsed = pendings.get(s.pending);
  if (!parsed) {
    parsed = pendingSchema.parse(s.pending);
    pendings.set(s.pending, parsed);
  }
  return parsed;
}

/** The money change that records `call`: its reservation, held against the limits the host decided (none for other calls). */
export function reservationOf(s: Pick<SessionRecord, "id">, call: PendingCall): MoneyChange | undefined {
  const { effect, reservation } = call;
  if (!effect || !reservation) return undefined;
  const { customerId, currency, limits } = reservation;
  return {
    reserve: {
      key: effect.key,
      sessionId: s.id,
      tool: effect.tool,
      entity: effect.entity,
      entityId: effect.entityId,
      customerId,
      currency,
      amount: effect.amount,
    },
    limits: { ...limits, taskMax: limits.taskMax },
  };
}

/** What the user got from an ended session, as stored with its stop. */
export function storedOutcome(
  s: Pick<SessionRecord, "context">,
): { readonly kind: string; readonly reason: string } | undefined {
  const outcome = (s.context as { outcome?: { kind?: unknown; reason?: unknown } }).outcome;
  return typeof outcome?.kind === "string"
    ? { kind: outcome.kind, reason: typeof outcome.reason === "string" ? outcome.reason : "" }
    : undefined;
}

/** The confidence the session's final answer was given with, as stored with its stop. */
export function storedConfidence(
  s: Pick<SessionRecord, "context">,
): { readonly value: number; readonly reason: string } | undefined {
  const stated = (s.context as { answerConfidence?: { value?: unknown; reason?: unknown } }).answerConfidence;
  return typeof stated?.value === "number"
    ? { value: stated.value, reason: typeof stated.reason === "string" ? stated.reason : "" }
    : undefined;
}

/** The effects a session's context records as done (observed to succeed). */
export function effectsOf(s: SessionRecord): EffectRecord[] {
  return contextOf(s).effects ?? [];
}

// Context and pending are JSON by construction (every field above is): the same object read back needs no parse.
export function contextJson(context: SessionContext): JsonObject {
  const json = context as unknown as JsonObject;
  contexts.set(json, context);
  return json;
}

export function pendingJson(pending: Pending): JsonObject {
  const json = pending as unknown as JsonObject;
  pendings.set(json, pending);
  return json;
}

/** The pending work left after a call: the rest of the queue, or nothing. */
export function queueLeft(queue: Pending["queue"]): JsonObject | null {
  return queue.length > 0 ? pendingJson({ queue }) : null;
}

export function envelopeJson(envelope: ResultEnvelope): JsonObject {
  return envelope as unknown as JsonObject;
}

/**
 * The envelope with personal data redacted from its data, error, refs and note; its flags, cost and
 * timestamp are the host's own. A step record holding it keeps it as it is (asRedacted), not
 * scanned again.
 */
export function redactedEnvelope(envelope: ResultEnvelope): ResultEnvelope {
  const { data, error } = envelope;
  return asRedacted({
    ok: envelope.ok,
    ...(data === undefined ? {} : { data: redact(data) }),
    ...(error === undefined ? {} : { error: redact(error) }),
    refs: redact(envelope.refs),
    costMicros: envelope.costMicros,
    servedFrom: envelope.servedFrom,
    observedAt: envelope.observedAt,
    ...(envelope.ageMs === undefined ? {} : { ageMs: envelope.ageMs }),
    ...(envelope.note === undefined ? {} : { note: redactText(envelope.note) }),
  });
}

/** The irreversible side effects a session has observed succeed, by their world references ("<entity>:<id>"). */
function sideEffectsOf(s: SessionRecord, registry: ToolRegistry): string[] {
  return contextOf(s).history.flatMap((item) =>
    item.kind === "observation" && item.envelope.ok && registry.get(item.tool)?.effect === Effect.IRREVERSIBLE_EXTERNAL
      ? [`${item.tool} ${item.envelope.refs.join(" ")}`]
      : [],
  );
}

/** What a stopping session's answer adds on what it already did ("; already done<when>: …"), or "". */
export function alreadyDone(s: SessionRecord, registry: ToolRegistry, when = ""): string {
  const done = sideEffectsOf(s, registry);
  return done.length > 0 ? `; already done${when}: ${done.join(", ")}` : "";
}

/** The session's context figures for the API, once it has asked the model (see prompt.ts). */
export function contextUsageOf(s: SessionRecord): {
  context?: { promptTokens: bigint; windowTokens: bigint; savedTokens: bigint; compressions: number; alarms: number };
} {
  const ctx = contextOf(s);
  if (ctx.contextTokens === undefined) return {};
  return {
    context: {
      promptTokens: BigInt(ctx.contextTokens),
      windowTokens: BigInt(ctx.contextWindow ?? 0),
      savedTokens: BigInt(ctx.savedTokens ?? 0),
      compressions: ctx.compressions ?? 0,
      alarms: ctx.contextAlarms ?? 0,
    },
  };
}
