// How the CLI shows a session: one line in a list, a block for \`show\`, an object for --json.
import type { MessageShape } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { type SessionSchema, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { reidentify } from "../guard/personal-data.js";
import type { JsonObject } from "../store/session-store.js";

type Session = MessageShape<typeof SessionSchema>;

export const stateName = (s: SessionState) => SessionState[s] ?? String(s);

/**
 * What the server said, as a terminal may show it: control characters (an escape sequence in a
 * model's words could move the cursor over the action an approver is deciding on) and
 * bidirectional overrides are written out as \u{…}; new lines and tabs stay.
 */
export function printable(text: string): string {
  return text.replace(/[\p{Cc}\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu, (c) =>
    c === "\n" || c === "\t" ? c : `\\u{${c.codePointAt(0)!.toString(16)}}`,
  );
}

export function summary(s: Session): string {
  const usage = s.usage;
  return printable(
    `${s.sessionId}  ${stateName(s.state).padEnd(17)} ${(s.stopReason || "-").padEnd(16)} steps ${usage?.steps ?? 0}/${s.budget?.maxSteps ?? 0}  tools ${usage?.toolCalls ?? 0}  health ${s.healthScore}  ${s.goal.slice(0, 60)}`,
  );
}

export function printSession(s: Session): void {
  const lines = [
    `session   ${s.sessionId}`,
    `state     ${stateName(s.state)}${s.stopReason ? ` (${s.stopReason})` : ""}`,
    ...(s.outcome ? [`outcome   ${s.outcome.kind}${s.outcome.reason ? ` (${s.outcome.reason})` : ""}`] : []),
    ...(s.confidence !== undefined
      ? [`confidence ${s.confidence}${s.uncertaintyReason ? ` (${s.uncertaintyReason})` : ""}`]
      : []),
    `goal      ${s.goal}`,
    `policy    ${s.policy}   scopes ${s.scopes.join(" ")}`,
    `created   by ${s.createdBy || "unknown"}`,
    `budget    steps ${s.usage?.steps}/${s.budget?.maxSteps}  tool calls ${s.usage?.toolCalls}/${s.budget?.maxToolCalls}  tokens ${s.usage?.tokens}/${s.budget?.maxTokens}  cost ${s.usage?.costMicros}/${s.budget?.maxCostMicros} µ  wall ${s.usage?.wallClockMs}/${s.budget?.maxWallClockMs} ms  retries ${s.usage?.retries}/${s.budget?.maxRetries}${s.usage?.takeovers ? `  takeovers ${s.usage.takeovers}` : ""}`,
    ...(s.context
      ? [
          `context   ${s.context.promptTokens}/${s.context.windowTokens} tokens  saved ${s.context.savedTokens} by ${s.context.compressions} summaries  80% alarms ${s.context.alarms}`,
        ]
      : []),
    `health    ${s.healthScore}/100`,
    `trace id  ${s.traceId}`,
  ];
  if (s.pendingApproval) {
    lines.push(
      `approval  ${s.pendingApproval.approvalId}: ${s.pendingApproval.tool} ${JSON.stringify(s.pendingApproval.arguments)} — ${s.pendingApproval.reason}`,
    );
  }
  if (s.parked)
    lines.push(
      `parked    waiting for ${s.parked.tool} (${s.parked.reason}); tried again at ${isoOf(s.parked.wakeAt)}, parked ${s.parked.attempts} time(s) since ${isoOf(s.parked.since)}`,
    );
  if (s.answer) lines.push(`answer    ${s.answer}`);
  console.log(printable(lines.join("\n")));
}

const isoOf = (t: Parameters<typeof timestampMs>[0] | undefined): string =>
  t ? new Date(timestampMs(t)).toISOString() : "";

export function jsonOf(s: Session): Record<string, unknown> {
  return {
    session_id: s.sessionId,
    state: stateName(s.state),
    stop_reason: s.stopReason,
    ...(s.outcome ? { outcome: s.outcome.kind, outcome_reason: s.outcome.reason } : {}),
    ...(s.confidence !== undefined ? { confidence: s.confidence, uncertainty_reason: s.uncertaintyReason } : {}),
    answer: s.answer,
    trace_id: s.traceId,
    steps: s.usage?.steps ?? 0,
    tool_calls: s.usage?.toolCalls ?? 0,
    ...(s.parked
      ? {
          parked: {
            tool: s.parked.tool,
            reason: s.parked.reason,
            wake_at: isoOf(s.parked.wakeAt),
            since: isoOf(s.parked.since),
            attempts: s.parked.attempts,
          },
        }
      : {}),
    ...(s.pendingApproval
      ? {
          pending_approval: {
            approval_id: s.pendingApproval.approvalId,
            tool: s.pendingApproval.tool,
            reason: s.pendingApproval.reason,
          },
        }
      : {}),
  };
}

/**
 * The session with its answer's placeholders ({{task.phone}}) replaced from `task`: only for the
 * caller that sent the task (`run`); what the orchestrator stores and serves keeps placeholders.
 */
export function reidentified(s: Session, task: Record<string, unknown>): Session {
  return s.answer ? { ...s, answer: reidentify(s.answer, task as JsonObject) } : s;
}
