// One MCP tool call as a one-call session on the orchestrator, through its public gRPC API: start
// it with the call's task (single-call policy), wait until it ends or stops for a person or a tool,
// and say what happened as an MCP tool result. A refusal (scope, arguments, money rules) is a
// result with isError and the precise message; waiting for approval is not an error. An answer
// not given live says so first: a cached one its age, a degraded stand-in (an error) the host's note.
import { setTimeout as sleep } from "node:timers/promises";
import { Metadata } from "@grpc/grpc-js";
import type { RegisteredTool } from "@loopguard/orchestrator/tool-registry";
import { SINGLE_CALL_POLICY, singleCallTask } from "@loopguard/orchestrator/single-call";
import {
  type OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  backoffDelayMs,
  CALLER_ERROR_CODES,
  CallError,
  type Logger,
  type RawClient,
  status,
} from "@loopguard/tool-sdk";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { BulkheadRejectedError, type BulkheadPolicy } from "cockatiel";
import { type Context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { ended, refusal, text, waiting } from "./call-results.js";

/**
 * The session's tool calls: the one call the single-call policy makes, and the live reads the host
 * makes before a money call, each a tool call of the session (the entity, its customer's risk, the
 * entity again once calls in flight on it settle, and again when a person approves).
 */
const MAX_TOOL_CALLS = 5;

export interface CallDeps {
  readonly api: RawClient<typeof OrchestratorService>;
  readonly orchestratorAddr: string;
  readonly waitMs: number;
  readonly log: Logger;
  /**
   * The tool calls this gateway follows at once, across clients and batches (a bulkhead with no
   * queue): each starts a session and follows it for up to waitMs, so one HTTP batch of up to 32
   * calls cannot make it follow more than this.
   */
  readonly calls: BulkheadPolicy;
  /** The scopes a one-call session of the tool is granted (singleCallScopes). */
  scopesOf(tool: RegisteredTool): string[];
}

const tracer = trace.getTracer("@loopguard/mcp-gateway");
const propagator = new W3CTraceContextPropagator();

/** States a call stops waiting in: the end, or a wait for a person or a tool that may be long. */
const SETTLED = new Set([
  SessionState.DONE,
  SessionState.FAILED,
  SessionState.CANCELLED,
  SessionState.AWAITING_APPROVAL,
  SessionState.PARKED,
]);
const POLL_BACKOFF = { baseMs: 20, maxMs: 250, jitter: "none" } as const;

/** One tools/call: what it runs, as whom, and under which key and trace. */
export interface McpCall {
  readonly tool: RegisteredTool;
  readonly args: Record<string, unknown>;
  /** The StartSession key: the same key and call from the same caller is the same session. */
  readonly idempotencyKey: string;
  /** The caller's orchestrator token, asked for before each request. */
  tokenOf(): Promise<string>;
  /** The client's trace, if it sent one. */
  readonly parent: Context;
  /** Aborts once the client went away: the session is then no longer followed. */
  readonly signal?: AbortSignal | undefined;
}

/**
 * Runs a call as a one-call session of the caller. Past the gateway's limit of calls at once,
 * nothing is started and the result says so.
 */
export async function callAsSession(deps: CallDeps, call: McpCall): Promise<CallToolResult> {
  const { tool } = call;
  try {
    return await deps.calls.execute(() => follow(deps, call));
  } catch (error) {
    if (!(error instanceof BulkheadRejectedError)) throw error;
    deps.log.warn("mcp call refused: gateway busy", { tool: tool.name });
    return text(
      "RESOURCE_EXHAUSTED GATEWAY_BUSY: the gateway is running as many calls as it takes at once (MCP_MAX_CALLS); nothing was started, try again shortly",
      {
        error: { code: "RESOURCE_EXHAUSTED", reason: "GATEWAY_BUSY", message: "the gateway is at its limit of calls" },
      },
      true,
    );
  }
}

/** Codes a start or a poll is tried again after, within the wait: the orchestrator restarting, a bad second of its store. */
const TRANSIENT: ReadonlySet<status> = new Set([
  status.UNAVAILABLE,
  status.DEADLINE_EXCEEDED,
  status.RESOURCE_EXHAUSTED,
]);

/**
 * The pause before trying a failed start or poll again: the backoff, or longer if the orchestrator
 * asked for longer (RetryInfo). Undefined when it is not tried again: a refusal, or the caller's
 * quota of sessions in flight, which frees up as sessions end, not within one call's wait.
 */
function retryPauseMs(error: unknown, tries: number): number | undefined {
  if (!(error instanceof CallError) || !TRANSIENT.has(error.code) || error.reason === "SESSION_QUOTA_EXCEEDED")
    return undefined;
  return Math.max(backoffDelayMs(POLL_BACKOFF, tries), error.retryAfterMs ?? 0);
}

/** How grpc-js fails a call it never sent: no connection to send it on. */
const NOT_SENT = /No connection established/;

/**
 * Whether a failed start may have made its session. The raw client does not mark outcomes unknown,
 * so the failure tells: the orchestrator's refusal, or a call never sent, made nothing; a deadline,
 * a dropped connection or an internal error may have come after the session was stored.
 */
function mayHaveStarted(error: unknown): boolean {
  if (!(error instanceof CallError)) return false;
  if (error.outcomeUnknown) return true;
  if (error.code === status.UNAVAILABLE) return !error.reason && !NOT_SENT.test(error.message);
  return (
    error.code !== status.RESOURCE_EXHAUSTED && !(CALLER_ERROR_CODES.has(error.code) && error.code !== status.CANCELLED)
  );
}

async function follow(deps: CallDeps, call: McpCall): Promise<CallToolResult> {
  const { tool, parent, signal } = call;
  const span = tracer.startSpan(
    `mcp ${tool.name}`,
    { kind: SpanKind.CLIENT, attributes: { "mcp.tool": tool.name } },
    parent,
  );
  const metadata = new Metadata();
  propagator.inject(trace.setSpan(parent, span), metadata, { set: (carrier, key, value) => carrier.set(key, value) });
  // A token per request: the stdio gateway's own are short-lived, and a wait may outlast one.
  const options = async (deadline: number) => ({ token: await call.tokenOf(), metadata, deadline });
  const started = Date.now();
  // Whether a pause of `ms` still ends within the wait (a client gone has none left).
  const fitsWait = (ms: number) => Date.now() + ms - started < deps.waitMs && !signal?.aborted;
  const pause = (ms: number) => sleep(ms, undefined, signal ? { signal } : {}).catch(() => undefined);
  // One key for every try: a start the orchestrator made but whose answer was lost is answered again, not made twice.
  const request = {
    goal: `Call ${tool.name} for an MCP client`,
    task: singleCallTask(tool, call.args as never) as never,
    scopes: deps.scopesOf(tool),
    budget: { maxToolCalls: MAX_TOOL_CALLS },
    policy: SINGLE_CALL_POLICY,
    idempotencyKey: call.idempotencyKey,
  };
  // Any try may have made the session, not just the last: a lost answer, then an orchestrator down.
  let maybeStarted = false;
  try {
    let s: Session | undefined;
    for (let tries = 1; !s; tries += 1) {
      try {
        s = (await deps.api.startSession(request, await options(10_000))).session!;
      } catch (error) {
        maybeStarted ||= mayHaveStarted(error);
        const ms = retryPauseMs(error, tries);
        if (ms === undefined || !fitsWait(ms)) throw error;
        await pause(ms);
      }
    }
    span.setAttribute("loopguard.session_id", s.sessionId);
    let polls = 0;
    let next = backoffDelayMs(POLL_BACKOFF, 1);
    let lost: CallError | undefined;
    while (!SETTLED.has(s.state) && fitsWait(next)) {
      polls += 1;
      await pause(next);
      if (signal?.aborted) break;
      try {
        s = (await deps.api.getSession({ sessionId: s.sessionId }, await options(5000))).session!;
        next = backoffDelayMs(POLL_BACKOFF, polls + 1);
      } catch (error) {
        const ms = retryPauseMs(error, polls + 1);
        if (ms !== undefined) {
          next = ms;
          continue;
        }
        // Refused (a token that expired, a scope taken away): the session goes on; the client is told its id.
        if (!(error instanceof CallError)) throw error;
        lost = error;
        break;
      }
    }
    const result =
      SETTLED.has(s.state) && s.state !== SessionState.AWAITING_APPROVAL && s.state !== SessionState.PARKED
        ? ended(s)
        : waiting(s, lost);
    deps.log.info(signal?.aborted ? "mcp call abandoned by its client" : "mcp call", {
      tool: tool.name,
      session_id: s.sessionId,
      state: SessionState[s.state],
      is_error: result.isError === true,
      duration_ms: Date.now() - started,
      ...(lost ? { code: status[lost.code], reason: lost.reason ?? "" } : {}),
    });
    return result;
  } catch (error) {
    const result = refusal(error, deps.orchestratorAddr, maybeStarted ? call.idempotencyKey : undefined);
    span.setStatus({ code: SpanStatusCode.ERROR });
    deps.log.warn("mcp call refused", {
      tool: tool.name,
      code: error instanceof CallError ? status[error.code] : "INTERNAL",
      reason: error instanceof CallError ? (error.reason ?? "") : "",
      maybe_started: maybeStarted,
    });
    return result;
  } finally {
    span.end();
  }
}
