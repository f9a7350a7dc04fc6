// The pipeline before a call: the host's checks (plan.ts), then for an irreversible call the
// side-effect guards (live reads, amounts, risk, entities the task declares), which decide between
// refusing, parking, asking a human and calling. Nothing is written here.
import { confidenceFields, type StatedConfidence } from "../guard/confidence.js";
import { guardSideEffect, refusal } from "../guard/side-effect-guard.js";
import { outOfTask } from "../guard/task-scope.js";
import type { ToolCallRequest } from "../policies/policy.js";
import type { SessionRecord } from "../store/session-store.js";
import type { RegisteredTool } from "../tool-registry.js";
import { contextOf, type PendingCall, type SessionContext } from "./data.js";
import { guardDepsOf, type Kit } from "./kit.js";
import type { WaitFor } from "./park-rules.js";
import { argsHash, checkCall, type Refused } from "./plan.js";

/** What the host does with one tool call the policy asked for, decided before anything is written. */
export type CallPlan =
  | Refused
  /** A live read the host needs could not be made, for a reason that passes: the session waits for its tool. */
  | ({ readonly kind: "park" } & WaitFor)
  | {
      readonly kind: "approve";
      readonly tool: RegisteredTool;
      readonly call: PendingCall;
      readonly context: SessionContext;
      readonly why: string;
    }
  | {
      readonly kind: "start";
      readonly tool: RegisteredTool;
      readonly call: PendingCall;
      readonly context: SessionContext;
    };

export async function planCall(
  kit: Kit,
  s: SessionRecord,
  request: ToolCallRequest,
  confidence: StatedConfidence | undefined,
): Promise<CallPlan> {
  const { deps, spans } = kit;
  const checked = checkCall({
    session: s,
    context: contextOf(s),
    call: request,
    registry: deps.registry,
    now: deps.now(),
  });
  if (checked.kind !== "checked") return checked;
  const { tool, args, context } = checked;
  // The confidence goes with the call, so a call decided again (after BOUND_EXCEEDED) is judged by it again.
  const call: PendingCall = { ...checked.call, ...confidenceFields(confidence) };
  const outside = outOfTask(tool, args, s.task, context.history, (name) => deps.registry.get(name)?.method.output);
  if (outside)
    return {
      kind: "observe",
      envelope: refusal({ ...outside, retryable: false }, deps.now()),
      reason: "outside the task",
    };
  const guard = deps.rules.effectOf(tool);
  if (!guard) return { kind: "start", tool, call, context };
  // The guard's live reads are calls of the session: in its trace, under a span of their own.
  const verdict = await spans.span(s, `guard ${tool.name}`, { "gen_ai.tool.name": tool.name }, () =>
    guardSideEffect(guardDepsOf(kit), s, guard, args, String(args[tool.idempotencyKeyField ?? ""] ?? ""), confidence),
  );
  switch (verdict.kind) {
    case "park":
      return verdict;
    case "refuse":
      return { kind: "observe", envelope: refusal(verdict, deps.now()), reason: "precondition not met" };
    case "stop":
      return { kind: "stop", reason: verdict.reason, answer: verdict.answer };
    case "approve":
    case "start": {
      // The request as it goes out: with the bound the host decided on, which the approval's hash covers.
      const argumentsJson = JSON.stringify(verdict.args);
      const guarded: PendingCall = {
        ...call,
        arguments: argumentsJson,
        argsHash: argsHash(tool.name, argumentsJson),
        worldVersion: verdict.worldVersion,
        effect: verdict.effect,
        ...(verdict.reservation ? { reservation: verdict.reservation } : {}),
      };
      return verdict.kind === "approve"
        ? { kind: "approve", tool, call: guarded, context, why: verdict.why }
        : { kind: "start", tool, call: guarded, context };
    }
  }
}
