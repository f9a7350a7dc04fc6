// The policy of a one-call session (the MCP gateway's): it makes exactly the call its task names,
// with the task's arguments, and answers with that call's result envelope as JSON. No model is
// involved, so every host rule still applies to the call: the task names the entities, amounts and
// personal data the arguments carry (singleCallTask), so the task-bound, side-effect and
// personal-data rules hold it as they hold a model's call.
import { createHash } from "node:crypto";
import { FieldRole, fieldPolicy } from "@loopguard/tool-sdk";
import { placeholderOf } from "../guard/personal-data.js";
import { errorEnvelope } from "./envelope.js";
import type { Decision, Policy, PolicyInput } from "./policy.js";
import type { JsonObject, JsonValue } from "../store/session-store.js";
import { SideEffectRules } from "../guard/side-effects.js";
import type { RegisteredTool, ToolRegistry } from "../tool-registry.js";

export const SINGLE_CALL_POLICY = "single-call";

/** The task kind a one-call session is started with. */
export const SINGLE_CALL_TASK_KIND = "tool_call";

/**
 * The task of a one-call session of `tool` with `args` (JSON names): the call itself, and every
 * entity id, task-bound value and piece of personal data the arguments carry, under the task field
 * the contract names (an entity's "<entity>_id"), so the host checks the call against it. Personal
 * data stays out of the stored arguments: they name it by placeholder, as a model would.
 */
export function singleCallTask(tool: RegisteredTool, args: JsonObject): JsonObject {
  const task: JsonObject = { kind: SINGLE_CALL_TASK_KIND, tool: tool.name };
  const shown: JsonObject = { ...args };
  for (const field of tool.method.input.fields) {
    const value = args[field.jsonName] ?? args[field.name];
    if (value === undefined || value === null) continue;
    const p = fieldPolicy(field);
    if (p.role === FieldRole.PERSONAL_DATA && p.taskField) {
      task[p.taskField] = value;
      // Protobuf JSON takes the field's proto name too ("id_card"): keep one spelling, the placeholder.
      if (field.name !== field.jsonName) delete shown[field.name];
      shown[field.jsonName] = placeholderOf(p.taskField);
      continue;
    }
    if (p.role === FieldRole.ENTITY_ID && p.entity) task[`${p.entity}_id`] = value;
    if (p.taskField) task[p.taskField] = value;
  }
  task.arguments = shown;
  return task;
}

/**
 * The scopes a one-call session of `tool` needs: the tool's, and for an irreversible one the
 * scopes of the live reads the host makes before it (the entity's state, the customer's risk).
 */
export function singleCallScopes(registry: ToolRegistry): (tool: RegisteredTool) => string[] {
  const rules = new SideEffectRules(registry);
  return (tool) => {
    const guard = rules.effectOf(tool);
    const scopes = [tool.requiredScope, guard?.reader?.tool.requiredScope, guard?.risk?.reader.tool.requiredScope];
    return [...new Set(scopes.filter((s): s is string => Boolean(s)))];
  };
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export class SingleCallPolicy implements Policy {
  readonly name = SINGLE_CALL_POLICY;

  async decide(input: PolicyInput): Promise<Decision> {
    const promptHash = createHash("sha256")
      .update(JSON.stringify({ task: input.task, history: input.history }))
      .digest("hex");
    const usage = { input: 0, output: 0 };
    const tool = typeof input.task.tool === "string" ? input.task.tool : "";
    const observed = input.history.find((h) => h.kind === "observation");
    if (observed?.kind === "observation")
      return { kind: "final", answer: JSON.stringify(observed.envelope), usage, promptHash };
    if (input.task.kind !== SINGLE_CALL_TASK_KIND || !tool || !isObject(input.task.arguments)) {
      const refused = errorEnvelope(
        {
          code: "EINVAL",
          message: `a ${SINGLE_CALL_POLICY} session needs a task {"kind":"${SINGLE_CALL_TASK_KIND}","tool":…,"arguments":{…}}`,
          suggestedAction: "start it with such a task",
        },
        Date.now(),
      );
      return { kind: "final", answer: JSON.stringify(refused), usage, promptHash };
    }
    // The policy forwards a client's call and judges nothing, so it states no confidence; the host
    // sends every irreversible call of this policy's sessions to another person (side-effect-guard.ts).
    return {
      kind: "tool_calls",
      calls: [{ id: `call_${input.step}_0`, name: tool, arguments: JSON.stringify(input.task.arguments) }],
      usage,
      promptHash,
    };
  }
}
