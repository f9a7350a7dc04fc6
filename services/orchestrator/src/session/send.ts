// One send of a pending call through the tool's client, and the observation of what it gave.
import { type DescService, fromJson, toJson } from "@bufbuild/protobuf";
import { Effect, status, CallError, type ToolClient, type ToolResult } from "@loopguard/tool-sdk";
import { SpanStatusCode } from "@opentelemetry/api";
import { callDeadline, deadlineOf, retriesLeft } from "../guard/budget.js";
import { ageInWords, type ResultEnvelope } from "../policies/policy.js";
import { errorEnvelope } from "../policies/envelope.js";
import type { JsonValue, SessionRecord } from "../store/session-store.js";
import type { RegisteredTool } from "../tool-registry.js";
import { refsOf } from "./world-refs.js";
import type { Pending, PendingCall } from "./data.js";
import { holdReleased, type Kit } from "./kit.js";
import type { Via } from "./moves.js";
import { observe } from "./observe.js";

/** One call in flight: the tool, its client, the request, and the session's pending work. */
export interface InFlight {
  readonly tool: RegisteredTool;
  readonly client: ToolClient<DescService>;
  readonly call: PendingCall;
  readonly pending: Pending;
}

/** What a send gave: an answer, or a failure (with how long it took). */
export type Sent = { readonly result: ToolResult<never> } | { readonly error: CallError; readonly durationMs: number };

const SUGGESTIONS: Partial<Record<number, string>> = {
  [status.INVALID_ARGUMENT]: "fix the arguments named in the error and call again",
  [status.NOT_FOUND]: "check the identifiers; do not retry the same call",
  [status.FAILED_PRECONDITION]: "the world does not allow this action now; explain that in the answer",
  [status.ALREADY_EXISTS]: "the action was already done with other parameters; do not repeat it",
  [status.UNAVAILABLE]: "the tool is unavailable; answer with what is known or try later",
  [status.DEADLINE_EXCEEDED]: "the tool did not answer in time; answer with what is known",
  [status.RESOURCE_EXHAUSTED]: "the tool is overloaded; try later",
};

/**
 * One call of the pending request through the tool's client. An irreversible call is never cut
 * off — not by a cancel, a shutdown or a lost lease — and always gets its whole SLA timeout: an
 * abandoned side effect is one whose outcome nobody knows.
 */
export async function send(
  kit: Kit,
  s: SessionRecord,
  { tool, client, call }: InFlight,
  signal: AbortSignal,
  onRetry?: () => Promise<void>,
): Promise<Sent> {
  const irreversible = tool.effect === Effect.IRREVERSIBLE_EXTERNAL;
  const deadline = callDeadline(
    tool.timeoutMs,
    irreversible ? undefined : deadlineOf(s.usage, s.budget),
    kit.deps.now(),
  );
  const started = performance.now();
  return kit.spans.span(
    s,
    `execute_tool ${tool.name}`,
    { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool.name, "gen_ai.tool.call.id": call.id },
    async (span) => {
      try {
        const request = fromJson(tool.method.input, JSON.parse(call.arguments) as JsonValue);
        const sendWith = async () =>
          client.call(tool.method.localName as never, request as never, {
            deadline: new Date(deadline),
            token: await kit.deps.tokens.for(s.id, tool, deadline, request),
            // The degraded answer is the host's last resort (park.ts), not the client's first.
            degraded: false,
            // A read's retries and hedges draw on the session's retry budget; an irreversible call's
            // re-sends (same idempotency key) are how its outcome becomes known, so they are counted, never cut.
            ...(irreversible ? {} : { signal, maxExtraAttempts: retriesLeft(s.usage, s.budget) }),
            ...(onRetry ? { onRetry } : {}),
          });
        const result = await sendWith().catch((error: unknown) => {
          // A rotation's new call key that has not reached this tool yet: refused before anything
          // ran, so sent again at once under the key the tool still holds.
          if (!(error instanceof CallError && kit.deps.tokens.refusedKey(tool.tool, error))) throw error;
          return sendWith();
        });
        span.setAttributes({
          "loopguard.served_from": result.source,
          "loopguard.attempts": result.attempts,
          "loopguard.breaker_state": client.breakerState,
          // A hedge is one more attempt of the same tool call, not another call: the session counts one tool call either way.
          "loopguard.hedged": result.hedged ?? false,
        });
        return { result: result as ToolResult<never> };
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        if (!(error instanceof CallError)) throw error;
        return { error, durationMs: performance.now() - started };
      }
    },
  );
}

/**
 * What a fallback answer is, in the envelope: a cached one's time and age (its time on the shared clock,
 * `now`, as a live answer's is), or why a degraded one stands in for the tool.
 */
function fallbackWords(tool: RegisteredTool, result: ToolResult<never>, now: number): Partial<ResultEnvelope> {
  const why = result.liveError
    ? `${status[result.liveError.code] ?? result.liveError.code}${result.liveError.reason ? ` ${result.liveError.reason}` : ""}`
    : "unavailable";
  if (result.source === "cache" && result.cacheAgeMs !== undefined) {
    const ageMs = result.cacheAgeMs;
    const cachedAt = new Date(now - ageMs).toISOString();
    return {
      observedAt: cachedAt,
      ageMs,
      note: `${tool.tool} is unavailable now (${why}); this is its answer from ${ageInWords(ageMs)} ago, as of ${cachedAt}`,
    };
  }
  if (result.source === "degraded") {
    return {
      note: `${tool.tool} was unavailable (${why}); this is its declared empty answer, not a finding: say that ${tool.tool} could not be consulted`,
    };
  }
  return {};
}

/** Observes what one send gave: the answer (live or a fallback), or a failure that is certain. */
export function observeSent(
  kit: Kit,
  state: SessionRecord,
  { tool, call, pending }: InFlight,
  sent: Sent,
): Promise<SessionRecord> {
  const now = kit.deps.now();
  const observedAt = new Date(now).toISOString();
  if ("error" in sent) {
    const e = sent.error;
    // Refused before anything ran: a money call's hold is let go, unless an earlier attempt's outcome is unknown.
    const money = holdReleased(pending);
    const release = money ? { money } : {};
    if (e.code === status.PERMISSION_DENIED)
      return kit.moves.stop(
        state,
        "permission_denied",
        `${tool.name} refused the session's credentials: ${e.message}`,
        release,
      );
    if (e.code === status.UNAUTHENTICATED)
      return kit.moves.stop(
        state,
        "unrecoverable_error",
        `${tool.name} did not accept the session's credential: ${e.message}`,
        release,
      );
    const code = status[e.code] ?? String(e.code);
    const envelope = errorEnvelope(
      {
        code,
        message: `${e.reason ? `${e.reason}: ` : ""}${e.message}`,
        retryable: e.retryable,
        suggestedAction: SUGGESTIONS[e.code] ?? "read the error and decide",
        ...(e.retryAfterMs === undefined ? {} : { retryAfterMs: e.retryAfterMs }),
      },
      kit.deps.now(),
      tool.costMicros,
    );
    return observe(kit, state, { ...pending, envelope, attempt: e.attempts, durationMs: sent.durationMs }, [
      {
        state: "OBSERVING",
        audit: { reason: `${tool.name} failed`, tool: tool.name, argsHash: call.argsHash, outcome: code },
      },
    ]);
  }
  const result = sent.result;
  const data = toJson(tool.method.output, result.response) as JsonValue;
  const envelope: ResultEnvelope = {
    ok: true,
    data,
    refs: refsOf(tool.method.output, data),
    costMicros: tool.costMicros,
    servedFrom: result.source,
    observedAt,
    ...fallbackWords(tool, result, now),
  };
  // The answer is observed in the same transaction that records it: a crash before that commit
  // leaves the session TOOL_EXECUTING, and the call is re-issued only if that is safe.
  const answered = { tool: tool.name, argsHash: call.argsHash, outcome: result.source };
  const via: Via[] =
    result.source === "live"
      ? [{ state: "OBSERVING", audit: { reason: `${tool.name} answered`, ...answered } }]
      : [
          { state: "FALLBACK", audit: { reason: `${tool.name} answered from ${result.source}`, ...answered } },
          { state: "OBSERVING", audit: { reason: "fallback answer observed" } },
        ];
  return observe(kit, state, { ...pending, envelope, attempt: result.attempts, durationMs: result.latencyMs }, via);
}
