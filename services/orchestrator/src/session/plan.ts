// Call planning as pure functions: what the host does with one tool call the policy asked for,
// before anything is written and before any guard reads the world — known tool, valid arguments,
// scope, budget, the idempotency key — and whether a call a dead replica left in flight may be
// sent again.
import { toJson } from "@bufbuild/protobuf";
import { Effect } from "@loopguard/tool-sdk";
import { refuseToolCall } from "../guard/budget.js";
import { errorEnvelope } from "../policies/envelope.js";
import type { ResultEnvelope, ToolCallRequest } from "../policies/policy.js";
import { sha256 } from "../guard/progress.js";
import { shownArguments, withTaskValues } from "../guard/personal-data.js";
import { redactText } from "../guard/redact.js";
import type { StopReason } from "./session-state.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import { argumentsJson, decodeToolArguments } from "../guard/tool-arguments.js";
import { dryFieldsOf, type RegisteredTool, type ToolRegistry } from "../tool-registry.js";
import type { PendingCall, SessionContext } from "./data.js";

/** What a call becomes without a tool call: an observation the host makes itself, or the session's end. */
export type Refused =
  | { readonly kind: "observe"; readonly envelope: ResultEnvelope; readonly reason: string }
  | { readonly kind: "stop"; readonly reason: StopReason; readonly answer: string };

/** A call that passed the host's checks: its canonical arguments (key included) and the context that records it. */
export interface Checked {
  readonly kind: "checked";
  readonly tool: RegisteredTool;
  readonly args: JsonObject;
  readonly call: PendingCall;
  readonly context: SessionContext;
}

export interface CheckInput {
  readonly session: Pick<SessionRecord, "id" | "scopes" | "usage" | "budget" | "task">;
  readonly context: SessionContext;
  readonly call: ToolCallRequest;
  readonly registry: ToolRegistry;
  readonly now: number;
}

export function argsHash(tool: string, args: string): string {
  return sha256(`${tool}\n${args}`).slice(0, 32);
}

/**
 * The idempotency key of a side effect: the session, the tool and the canonical arguments (the
 * request's JSON in field order, without the fields the host fills: the key and the amount bound).
 * The same intended effect gets the same key — across re-plans, retries, restarts and a bound
 * decided again — so a tool makes it at most once.
 */
export function idempotencyKeyOf(sessionId: string, tool: RegisteredTool, args: JsonObject): string {
  const intent = Object.fromEntries(Object.entries(args).filter(([field]) => !tool.hostFields.has(field)));
  return `lg-${sha256(`${sessionId}\n${tool.name}\n${JSON.stringify(intent)}`).slice(0, 40)}`;
}

/**
 * The checks before a call: known tool, arguments within the tool's size, the task's values in its
 * personal-data fields (personal-data.ts), valid arguments, scope, budget; then its key and its
 * record in the history, which keeps the model's placeholders while the call carries the values.
 */
export function checkCall({ session: s, context, call, registry, now }: CheckInput): Refused | Checked {
  const tool = registry.get(call.name);
  if (!tool) {
    const known = registry
      .specs(s.scopes)
      .map((t) => t.name)
      .join(", ");
    return {
      kind: "observe",
      envelope: errorEnvelope(
        {
          code: "ENOTOOL",
          message: `no tool named "${redactText(call.name)}"`,
          suggestedAction: `use one of: ${known}`,
        },
        now,
      ),
      reason: "unknown tool",
    };
  }
  if (call.argumentsBytes !== undefined) {
    const message = `arguments for ${tool.name} are ${call.argumentsBytes} bytes; it accepts at most ${tool.maxRequestBytes}. They began: ${call.arguments}…`;
    return {
      kind: "observe",
      envelope: errorEnvelope(
        { code: "EINVAL", message, suggestedAction: "send arguments within the size the tool accepts" },
        now,
      ),
      reason: "arguments too large",
    };
  }
  const json = argumentsJson(call.arguments);
  if (!json.ok) return invalidArguments(json.message, now);
  const personal = withTaskValues(tool.name, tool.personalFields, json.value, s.task);
  if (!personal.ok)
    return {
      kind: "observe",
      envelope: errorEnvelope(
        { code: "EPRECOND", message: personal.message, suggestedAction: personal.suggestedAction },
        now,
      ),
      reason: "personal data the task does not name",
    };
  const parsed = decodeToolArguments(tool, personal.value);
  if (!parsed.ok) return invalidArguments(parsed.message, now);
  if (tool.requiredScope && !s.scopes.includes(tool.requiredScope)) {
    return {
      kind: "stop",
      reason: "permission_denied",
      answer: `the session is not granted scope "${tool.requiredScope}" needed by ${tool.name}`,
    };
  }
  const refused = refuseToolCall(s.usage, s.budget, tool.costMicros, now);
  if (refused)
    return {
      kind: "stop",
      reason: refused,
      answer: `stopped before calling ${tool.name}: ${refused.replace(/_/g, " ")} reached`,
    };
  const args = toJson(tool.method.input, parsed.message) as JsonObject;
  if (tool.idempotencyKeyField) args[tool.idempotencyKeyField] = idempotencyKeyOf(s.id, tool, args);
  // After the key: a dry run and a live run of one intent share it (a session is one or the other, by its task).
  for (const field of dryFieldsOf(tool, s.task)) args[field] = true;
  const request = JSON.stringify(args);
  const history = [
    ...context.history,
    {
      kind: "call" as const,
      callId: call.id,
      tool: tool.name,
      arguments: JSON.stringify(shownArguments(tool.personalFields, args)),
    },
  ];
  return {
    kind: "checked",
    tool,
    args,
    call: {
      id: call.id,
      tool: tool.name,
      arguments: request,
      argsHash: argsHash(tool.name, request),
      worldVersion: "",
    },
    context: { ...context, history },
  };
}

function invalidArguments(message: string, now: number): Refused {
  return {
    kind: "observe",
    envelope: errorEnvelope({ code: "EINVAL", message, suggestedAction: "fix the arguments and call again" }, now),
    reason: "invalid arguments",
  };
}

/**
 * Whether a call a dead replica left in flight may be sent again: a read, an idempotent write, or
 * one carrying its idempotency key (the tool replays it if it was made). Anything else may or may
 * not have taken effect, and a human decides.
 */
export function safeToReissue(tool: RegisteredTool, call: PendingCall): boolean {
  return (
    tool.effect === Effect.READ_ONLY ||
    tool.effect === Effect.IDEMPOTENT_WRITE ||
    (tool.idempotencyKeyField !== undefined && call.arguments.includes(tool.idempotencyKeyField))
  );
}
