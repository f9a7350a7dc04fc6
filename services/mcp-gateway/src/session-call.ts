// One MCP tool call as a one-call session on the orchestrator, through its public gRPC API: start
// it with the call's task (single-call policy), wait until it ends or stops for a person or a tool,
// and say what happened as an MCP tool result. A refusal (scope, arguments, money rules) is a
// result with isError and the precise message; waiting for approval is not an error. An answer
// not given live says so first: a cached one its age, a degraded stand-in (an error) the host's note.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Metadata } from "@grpc/grpc-js";
import type { RegisteredTool } from "@loopguard/orchestrator/tool-registry";
import { SINGLE_CALL_POLICY, singleCallTask } from "@loopguard/orchestrator/single-call";
import {
  type OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { backoffDelayMs, CallError, type Logger, type RawClient, status } from "@loopguard/tool-sdk";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { BulkheadRejectedError, type BulkheadPolicy } from "cockatiel";
import { type Context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";

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
   * queue): each starts a session and follows it for up to waitMs, so one HTTP batch of up to 100
   * calls cannot make it follow more than this.
   */
  readonly calls: BulkheadPolicy;
  /** The scopes a one-call session of the tool is granted (singleCallScopes). */
  scopesOf(tool: RegisteredTool): string[];
}

type Json = CallToolResult["structuredContent"];

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

function text(message: string, structured: Json, isError = false): CallToolResult {
  return {
    content: [{ type: "text", text: message }],
    structuredContent: structured,
    ...(isError ? { isError: true } : {}),
  };
}

function iso(ts: Session["createdAt"]): string {
  return ts ? timestampDate(ts).toISOString() : "";
}

/** A refused or failed API call, as precise as the orchestrator said it (reason, field violations). */
export function refusal(error: unknown, addr: string): CallToolResult {
  if (!(error instanceof CallError))
    return text("the gateway failed to call the orchestrator", { error: { code: "INTERNAL" } }, true);
  if (error.code === status.UNAVAILABLE && !error.reason) {
    return text(
      `cannot reach the orchestrator at ${addr} (is \`pnpm start\` running?)`,
      { error: { code: "UNAVAILABLE", orchestrator: addr } },
      true,
    );
  }
  const code = status[error.code] ?? String(error.code);
  const violations = error.fieldViolations.map((v) => ({ field: v.field, description: v.description }));
  const detail =
    violations.length > 0 ? violations.map((v) => `${v.field}: ${v.description}`).join("; ") : error.message;
  return text(
    `${code}${error.reason ? ` ${error.reason}` : ""}: ${detail}`,
    { error: { code, reason: error.reason ?? "", message: error.message, fieldViolations: violations } },
    true,
  );
}

/** The single-call policy's answer: the call's result envelope (the orchestrator's ResultEnvelope). */
interface Envelope {
  ok?: boolean;
  data?: unknown;
  error?: { code: string; message: string; suggestedAction?: string };
  refs?: string[];
  servedFrom?: string;
  observedAt?: string;
  ageMs?: number;
  note?: string;
}

/**
 * An answer the tool did not give live opens its text with the host's note, as a client's model
 * reads only the text. A degraded answer is a declared stand-in, not the tool's data: an error
 * result, without the stand-in. A cached one is the tool's data, with its age.
 */
function answered(envelope: Envelope, base: Record<string, unknown>): CallToolResult {
  const result = { result: (envelope.data ?? null) as never, refs: envelope.refs ?? [] };
  const data = JSON.stringify(result.result);
  const { servedFrom = "", note = "" } = envelope;
  const opening = (label: string) => (note ? `${label}: ${note}` : label);
  if (servedFrom === "degraded") return text(opening("degraded"), { ...base, servedFrom, note }, true);
  if (servedFrom === "cache")
    return text(`${opening("served from cache")}\n${data}`, {
      ...base,
      ...result,
      servedFrom,
      note,
      observedAt: envelope.observedAt,
      ageMs: envelope.ageMs,
    });
  return text(data, { ...base, ...result, servedFrom });
}

/** The tool's result from the session's answer: the single-call policy answers with the call's result envelope. */
function ended(s: Session): CallToolResult {
  const base = {
    sessionId: s.sessionId,
    state: SessionState[s.state],
    outcome: s.outcome?.kind ?? "",
    traceId: s.traceId,
  };
  let envelope: Envelope | undefined;
  try {
    envelope = JSON.parse(s.answer) as Envelope;
  } catch {
    envelope = undefined;
  }
  if (s.state === SessionState.DONE && envelope?.ok === true) return answered(envelope, base);
  if (envelope?.error) {
    const e = envelope.error;
    return text(
      `${e.code}: ${e.message}${e.suggestedAction ? ` (${e.suggestedAction})` : ""}`,
      { ...base, error: { code: e.code, message: e.message } },
      true,
    );
  }
  return text(
    `session ${s.sessionId} ended ${SessionState[s.state]} (${s.stopReason || "no reason given"}): ${s.answer || "no answer"}`,
    { ...base, stopReason: s.stopReason, answer: s.answer },
    true,
  );
}

function waiting(s: Session): CallToolResult {
  const base = { sessionId: s.sessionId, state: SessionState[s.state], traceId: s.traceId };
  if (s.state === SessionState.AWAITING_APPROVAL) {
    const a = s.pendingApproval;
    const expiresAt = iso(a?.expiresAt);
    return text(
      `Not done yet: session ${s.sessionId} waits for approval by someone other than ${s.createdBy} (${a?.reason ?? "approval needed"}). ` +
        `Nothing has been executed. The approval expires at ${expiresAt}; an approver decides with \`pnpm loopguard approve ${s.sessionId} --as approver\` (or deny).`,
      {
        ...base,
        approval: { approvalId: a?.approvalId ?? "", tool: a?.tool ?? "", reason: a?.reason ?? "", expiresAt },
      },
    );
  }
  if (s.state === SessionState.PARKED) {
    const p = s.parked;
    const wakeAt = iso(p?.wakeAt);
    return text(
      `Not done yet: session ${s.sessionId} waits for ${p?.tool ?? "a tool"} (${p?.reason ?? "unavailable"}) and tries again at ${wakeAt}.`,
      {
        ...base,
        parked: { tool: p?.tool ?? "", reason: p?.reason ?? "", wakeAt },
      },
    );
  }
  return text(
    `Not done yet: session ${s.sessionId} is still ${SessionState[s.state]}; look it up with \`pnpm loopguard show ${s.sessionId}\`.`,
    base,
  );
}

/**
 * Runs `tool` with `args` as a one-call session of the caller, under `parent` (the client's trace,
 * if it sent one). Past the gateway's limit of calls at once, nothing is started and the result
 * says so; once `signal` aborts (the client went away) the session is no longer followed.
 */
export async function callAsSession(
  deps: CallDeps,
  tool: RegisteredTool,
  args: Record<string, unknown>,
  token: string,
  parent: Context,
  signal?: AbortSignal,
): Promise<CallToolResult> {
  try {
    return await deps.calls.execute(() => follow(deps, tool, args, token, parent, signal));
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

async function follow(
  deps: CallDeps,
  tool: RegisteredTool,
  args: Record<string, unknown>,
  token: string,
  parent: Context,
  signal: AbortSignal | undefined,
): Promise<CallToolResult> {
  const span = tracer.startSpan(
    `mcp ${tool.name}`,
    { kind: SpanKind.CLIENT, attributes: { "mcp.tool": tool.name } },
    parent,
  );
  const metadata = new Metadata();
  propagator.inject(trace.setSpan(parent, span), metadata, { set: (carrier, key, value) => carrier.set(key, value) });
  const options = { token, metadata };
  const started = Date.now();
  try {
    const { session } = await deps.api.startSession(
      {
        goal: `Call ${tool.name} for an MCP client`,
        task: singleCallTask(tool, args as never) as never,
        scopes: deps.scopesOf(tool),
        budget: { maxToolCalls: MAX_TOOL_CALLS },
        policy: SINGLE_CALL_POLICY,
        idempotencyKey: `mcp-${randomUUID()}`,
      },
      { ...options, deadline: 10_000 },
    );
    let s = session!;
    span.setAttribute("loopguard.session_id", s.sessionId);
    let polls = 0;
    while (!SETTLED.has(s.state) && Date.now() - started < deps.waitMs && !signal?.aborted) {
      polls += 1;
      await sleep(backoffDelayMs(POLL_BACKOFF, polls), undefined, signal ? { signal } : {}).catch(() => undefined);
      if (signal?.aborted) break;
      s = (await deps.api.getSession({ sessionId: s.sessionId }, { ...options, deadline: 5000 })).session!;
    }
    const result =
      SETTLED.has(s.state) && s.state !== SessionState.AWAITING_APPROVAL && s.state !== SessionState.PARKED
        ? ended(s)
        : waiting(s);
    deps.log.info(signal?.aborted ? "mcp call abandoned by its client" : "mcp call", {
      tool: tool.name,
      session_id: s.sessionId,
      state: SessionState[s.state],
      is_error: result.isError === true,
      duration_ms: Date.now() - started,
    });
    return result;
  } catch (error) {
    const result = refusal(error, deps.orchestratorAddr);
    span.setStatus({ code: SpanStatusCode.ERROR });
    deps.log.warn("mcp call refused", {
      tool: tool.name,
      code: error instanceof CallError ? status[error.code] : "INTERNAL",
      reason: error instanceof CallError ? (error.reason ?? "") : "",
    });
    return result;
  } finally {
    span.end();
  }
}
