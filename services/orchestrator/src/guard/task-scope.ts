// What a call may touch, from the task the session was started with and the contract's field
// options: an argument bound to a task field with TASK_BOUND_EQUAL must be the task's value (when
// the task names one), a number bound with TASK_BOUND_AT_MOST must not be above it, and a read may
// name only entities the task declares or that the answers to such reads link to (an order's
// customer). A money amount's TASK_BOUND_AT_MOST is the session's total, which the side-effect
// guard holds against reservations; personal-data fields are checked where their placeholders
// are put back. The engine knows no tool or field by name.
import type { DescField, DescMessage } from "@bufbuild/protobuf";
import { Effect, FieldRole, fieldPolicy, TaskBound } from "@loopguard/tool-sdk";
import type { HistoryItem } from "../policies/policy.js";
import type { JsonObject, JsonValue } from "../store/session-store.js";
import { declaredEntities } from "./side-effects.js";
import { entitiesOf } from "../session/world-refs.js";
import type { RegisteredTool } from "../tool-registry.js";

/** A call outside what the task allows: an EPRECOND observation, never a call. */
export interface OutOfTask {
  readonly message: string;
  readonly suggestedAction: string;
}

const checks = new WeakMap<DescMessage, readonly FieldCheck[]>();

interface FieldCheck {
  readonly field: DescField;
  readonly role: FieldRole;
  readonly entity: string;
  readonly taskField: string;
  readonly bound: TaskBound;
}

function checksOf(message: DescMessage): readonly FieldCheck[] {
  let found = checks.get(message);
  if (!found) {
    found = message.fields.flatMap((field) => {
      const p = fieldPolicy(field);
      const bound = p.taskField && p.role !== FieldRole.PERSONAL_DATA ? p.taskBound : TaskBound.UNSPECIFIED;
      return bound !== TaskBound.UNSPECIFIED || p.role === FieldRole.ENTITY_ID
        ? [{ field, role: p.role, entity: p.entity, taskField: p.taskField, bound }]
        : [];
    });
    checks.set(message, found);
  }
  return found;
}

/** The task's value of a field bound to an enum, as that enum's value name: "DAMAGED" and "REFUND_REASON_DAMAGED" are one value. */
function sameValue(field: DescField, taskValue: JsonValue, argument: JsonValue | undefined): boolean {
  if (field.fieldKind === "enum" && typeof taskValue === "string") {
    const value = field.enum.values.find(
      (v) =>
        v.name === taskValue || v.localName === taskValue || v.name === `${field.enum.sharedPrefix ?? ""}${taskValue}`,
    );
    return value !== undefined && argument === value.name;
  }
  if (typeof taskValue === "number" || typeof argument === "number") return Number(taskValue) === Number(argument);
  return taskValue === argument;
}

const shown = (v: JsonValue | undefined): string => (typeof v === "string" ? v : JSON.stringify(v ?? null));

/** The response message of a tool, by its model-visible name; undefined for a tool it does not know. */
export type OutputOf = (tool: string) => DescMessage | undefined;

/**
 * "entity:id" of every entity the session's answers so far named or linked to, versions left off.
 * Read from each answer's fields through its tool's response message (entitiesOf), never by cutting
 * "@…" off a world ref: a link carries no version, and an id may itself hold "@" (a customer id is
 * any 1..64 characters), so "customer:cust_1@shop.example" is customer "cust_1@shop.example", not
 * customer "cust_1". An answer of a tool whose message is unknown gives only its refs without "@",
 * the ones that cannot be read two ways.
 */
function reachedEntities(history: readonly HistoryItem[], outputOf: OutputOf): Set<string> {
  const out = new Set<string>();
  for (const item of history) {
    if (item.kind !== "observation" || !item.envelope.ok) continue;
    const output = outputOf(item.tool);
    if (output) for (const entity of entitiesOf(output, item.envelope.data)) out.add(entity);
    else for (const ref of item.envelope.refs) if (!ref.includes("@")) out.add(ref);
  }
  return out;
}

/**
 * Why `args` for `tool` go beyond the task (whose session's history is `history`), or undefined.
 * `outputOf` gives the response message of the tools in the history (the session's registry).
 */
export function outOfTask(
  tool: RegisteredTool,
  args: JsonObject,
  task: JsonObject,
  history: readonly HistoryItem[],
  outputOf: OutputOf,
): OutOfTask | undefined {
  // Read from the history only for a call that names an entity (most calls name none).
  let reached: ReadonlySet<string> | undefined;
  for (const c of checksOf(tool.method.input)) {
    const name = c.field.jsonName;
    const argument = args[name];
    if (
      c.role === FieldRole.ENTITY_ID &&
      c.entity &&
      tool.effect !== Effect.IRREVERSIBLE_EXTERNAL &&
      argument !== undefined
    ) {
      const id = String(argument);
      const declared = declaredEntities(task, c.entity);
      if (!declared.includes(id)) {
        reached ??= reachedEntities(history, outputOf);
        if (!reached.has(`${c.entity}:${id}`)) {
          return {
            message: `${tool.name} reads ${c.entity} ${id}, which the task does not name${declared.length > 0 ? ` (it names ${declared.join(", ")})` : ""} and no answer so far links to; the host reads only what the task names or leads to`,
            suggestedAction: `read only the ${c.entity} the task names, or what its answers link to`,
          };
        }
      }
    }
    const taskValue = c.taskField ? task[c.taskField] : undefined;
    if (taskValue === undefined || taskValue === null || c.bound === TaskBound.UNSPECIFIED) continue;
    if (c.bound === TaskBound.EQUAL && !sameValue(c.field, taskValue, argument)) {
      return {
        message: `${tool.name}.${name} must be the task's ${c.taskField} (${shown(taskValue)}), not ${shown(argument)}`,
        suggestedAction: `use the task's ${c.taskField}`,
      };
    }
    // A money amount's bound is the session's total: the side-effect guard holds it, and asks a human above it.
    if (c.bound === TaskBound.AT_MOST && c.role !== FieldRole.AMOUNT && Number(argument) > Number(taskValue)) {
      return {
        message: `${tool.name}.${name} is ${shown(argument)}, above the task's ${c.taskField} (${shown(taskValue)})`,
        suggestedAction: `stay within the task's ${c.taskField}`,
      };
    }
  }
  return undefined;
}
