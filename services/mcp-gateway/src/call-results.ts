// What an MCP client is told of its call's session: the tool's answer once the session ended, a
// wait for a person or a tool (not an error), or the orchestrator's refusal as precisely as it said it.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, status } from "@loopguard/tool-sdk";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { IDEMPOTENCY_META_KEY } from "./idempotency-key.js";

type Json = CallToolResult["structuredContent"];

export function text(message: string, structured: Json, isError = false): CallToolResult {
  return {
    content: [{ type: "text", text: message }],
    structuredContent: structured,
    ...(isError ? { isError: true } : {}),
  };
}

function iso(ts: Session["createdAt"]): string {
  return ts ? timestampDate(ts).toISOString() : "";
}

/** What a failed API call says, as precisely as the orchestrator said it (reason, field violations). */
function failure(error: unknown, addr: string): { said: string; error: Record<string, unknown> } {
  if (!(error instanceof CallError))
    return { said: "the gateway failed to call the orchestrator", error: { code: "INTERNAL" } };
  const code = status[error.code] ?? String(error.code);
  if (error.code === status.DEADLINE_EXCEEDED && !error.reason)
    return {
      said: `DEADLINE_EXCEEDED: the orchestrator at ${addr} did not answer in time`,
      error: { code, orchestrator: addr },
    };
  if (error.code === status.UNAVAILABLE && !error.reason)
    return {
      said: `cannot reach the orchestrator at ${addr} (is \`pnpm start\` running?)`,
      error: { code, orchestrator: addr },
    };
  const violations = error.fieldViolations.map((v) => ({ field: v.field, description: v.description }));
  const detail =
    violations.length > 0 ? violations.map((v) => `${v.field}: ${v.description}`).join("; ") : error.message;
  return {
    said: `${code}${error.reason ? ` ${error.reason}` : ""}: ${detail}`,
    error: { code, reason: error.reason ?? "", message: error.message, fieldViolations: violations },
  };
}

/**
 * A start that failed. With `maybeStartedKey`, some try may have reached the orchestrator and made
 * the session under that idempotency key: the client is told to look before calling again, or to
 * call again with the key, which follows that session rather than starting another.
 */
export function refusal(error: unknown, addr: string, maybeStartedKey?: string): CallToolResult {
  const { said, error: structured } = failure(error, addr);
  if (maybeStartedKey === undefined) return text(said, { error: structured }, true);
  return text(
    `${said}; a session may have been started (idempotency key ${maybeStartedKey}). ` +
      `Do not call again before looking with \`pnpm loopguard sessions\`, or call again with ` +
      `_meta {"${IDEMPOTENCY_META_KEY}": "${maybeStartedKey}"}: ` +
      "that follows the session if it was started and starts it once if not.",
    { error: structured, maybeStarted: true, idempotencyKey: maybeStartedKey },
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
export function ended(s: Session): CallToolResult {
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

/**
 * A session not ended: waiting for a person or a tool, still running when the wait ran out, or lost
 * sight of (`lost`: a poll the orchestrator refused); named either way, so the client does not start another.
 */
export function waiting(s: Session, lost?: CallError): CallToolResult {
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
  if (lost) {
    const code = status[lost.code] ?? String(lost.code);
    return text(
      `Not done yet: session ${s.sessionId} was started and was ${SessionState[s.state]} when the gateway lost sight of it (${code}${lost.reason ? ` ${lost.reason}` : ""}). ` +
        `Do not call again, which would start another session: look it up with \`pnpm loopguard show ${s.sessionId}\`.`,
      { ...base, followError: { code, reason: lost.reason ?? "" } },
    );
  }
  return text(
    `Not done yet: session ${s.sessionId} is still ${SessionState[s.state]}; look it up with \`pnpm loopguard show ${s.sessionId}\`.`,
    base,
  );
}
