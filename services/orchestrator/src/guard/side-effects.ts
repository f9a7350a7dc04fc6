// The host's rules for side effects, read from the contracts: which entity an irreversible method
// acts on and whether it moves money (its side_effect option), which request fields carry the
// entity's id and the amount, and which read-only methods give an entity's live state (its
// version, the amount already moved and still available, the customer it belongs to, that
// customer's risk). The engine knows no tool by name: a new irreversible tool annotated the same
// way gets every guard, and one that declares a money effect without the reads the guards need is
// refused when the orchestrator starts, with the reason.
import type { DescField, DescMessage } from "@bufbuild/protobuf";
import {
  type ApprovalField,
  approvalOf,
  Effect,
  FieldRole,
  fieldPolicy,
  methodPolicy,
  TaskBound,
} from "@loopguard/tool-sdk";
import type { JsonObject, JsonValue } from "../store/session-store.js";
import type { RegisteredTool, ToolRegistry } from "../tool-registry.js";

/** JSON field names from a response's root to a value. */
export type Path = readonly string[];

/** A read-only method that returns one entity's live state. */
export interface EntityReader {
  readonly tool: RegisteredTool;
  readonly entity: string;
  /** JSON name of the request field taking the entity's id. */
  readonly idField: string;
  readonly version: Path | undefined;
  readonly moved: Path | undefined;
  readonly available: Path | undefined;
  readonly riskScore: Path | undefined;
  /** The ISO 4217 code of the entity's amounts. */
  readonly currency: Path | undefined;
  /** Entities this one belongs to (e.g. "customer"), by where their id is in the response. */
  readonly links: ReadonlyMap<string, Path>;
  /** Fields compared with an approval threshold (e.g. a risk score), with the words a human is shown ("risk score"). */
  readonly approvals: readonly ApprovalGate[];
}

/** A response field whose value at or above its setting's threshold sends the call to a human. */
export interface ApprovalGate {
  readonly path: Path;
  readonly words: string;
  readonly approval: ApprovalField;
}

/** What the host checks before one irreversible method. */
export interface GuardedEffect {
  readonly tool: RegisteredTool;
  readonly entity: string;
  /** JSON name of the request field holding the entity's id. */
  readonly idField: string;
  readonly movesMoney: boolean;
  /** JSON name of the request field holding the amount (money effects). */
  readonly amountField: string | undefined;
  /** JSON name of the request field the host fills with the entity's bound (money effects). */
  readonly boundField: string | undefined;
  /** The task field the amount is at most, over the session (TASK_BOUND_AT_MOST on the amount field). */
  readonly amountTaskField: string | undefined;
  /** A task of this "kind" asks for the effect (SideEffect.task_kind), with or without its figure. */
  readonly taskKind: string | undefined;
  /** The live read of the entity (money effects always have one). */
  readonly reader: EntityReader | undefined;
  /** The live risk read of the customer the entity belongs to (money effects). */
  readonly risk: { readonly link: Path; readonly reader: EntityReader } | undefined;
}

/** The JSON name of the request field with `role` (and `entity`, when given). */
function requestField(message: DescMessage, role: FieldRole, entity?: string): DescField | undefined {
  return message.fields.find((f) => {
    const p = fieldPolicy(f);
    return p.role === role && (entity === undefined || p.entity === entity);
  });
}

/** Every (path, field) of a response: its fields and those of its singular message fields, one level down. */
function responseFields(message: DescMessage): { path: Path; field: DescField }[] {
  return message.fields.flatMap((f) =>
    f.fieldKind === "message"
      ? [
          { path: [f.jsonName], field: f },
          ...f.message.fields.map((g) => ({ path: [f.jsonName, g.jsonName], field: g })),
        ]
      : [{ path: [f.jsonName], field: f }],
  );
}

function readerOf(tool: RegisteredTool, entity: string, where: string): EntityReader {
  if (tool.effect !== Effect.READ_ONLY) throw new Error(`${where} reads_entity "${entity}" but is not read-only`);
  const id = requestField(tool.method.input, FieldRole.ENTITY_ID, entity);
  if (!id)
    throw new Error(
      `${where} reads_entity "${entity}" but no field of ${tool.method.input.typeName} has (field) = {role: FIELD_ROLE_ENTITY_ID, entity: "${entity}"}`,
    );
  const found = responseFields(tool.method.output);
  const at = (role: FieldRole) => found.find((x) => fieldPolicy(x.field).role === role)?.path;
  const links = new Map<string, Path>();
  const approvals: ApprovalGate[] = [];
  for (const x of found) {
    const p = fieldPolicy(x.field);
    if (p.role === FieldRole.LINKED_ENTITY_ID && p.entity) links.set(p.entity, x.path);
    const approval = approvalOf(x.field);
    if (approval) approvals.push({ path: x.path, words: x.field.name.replaceAll("_", " "), approval });
  }
  return {
    tool,
    entity,
    idField: id.jsonName,
    version: at(FieldRole.ENTITY_VERSION),
    moved: at(FieldRole.AMOUNT_MOVED),
    available: at(FieldRole.AMOUNT_AVAILABLE),
    riskScore: at(FieldRole.RISK_SCORE),
    currency: at(FieldRole.CURRENCY),
    links,
    approvals,
  };
}

/** What a task asks of one irreversible tool: an effect on each entity it names, the amounts adding up to its figure. */
export interface AskedEffect {
  readonly tool: string;
  readonly entity: string;
  readonly entityIds: readonly string[];
  /** The task field the amounts add up to, and the task's figure there (undefined when it is not a whole number); empty, and no figure, when the task asks by its kind alone. */
  readonly field: string;
  readonly figure: number | undefined;
}

/** The task's figure for a task field, when it states a usable one: a whole number, or a string of digits. */
export function taskFigure(task: JsonObject, field: string): number | undefined {
  const v = task[field];
  const n = typeof v === "number" ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : Number.NaN;
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

export class SideEffectRules {
  readonly #effects = new Map<string, GuardedEffect>();
  readonly #readers = new Map<string, EntityReader>();

  /** Throws, naming the method and what it lacks, when a contract declares a guard the host cannot enforce. */
  constructor(registry: ToolRegistry) {
    for (const tool of registry.list()) {
      const entity = methodPolicy(tool.method).readsEntity;
      if (!entity) continue;
      const where = `${tool.name} (${tool.method.parent.typeName}.${tool.method.name})`;
      const clash = this.#readers.get(entity);
      if (clash)
        throw new Error(
          `${where} and ${clash.tool.name} both declare reads_entity "${entity}"; one method must be the entity's live read`,
        );
      this.#readers.set(entity, readerOf(tool, entity, where));
    }
    for (const tool of registry.list()) {
      if (tool.effect !== Effect.IRREVERSIBLE_EXTERNAL) continue;
      this.#effects.set(tool.name, this.#guard(tool));
    }
  }

  /** Whether `name` (a model-visible tool name) is an irreversible tool. */
  isIrreversible(name: string): boolean {
    return this.#effects.has(name);
  }

  /**
   * The irreversible effects a task asks for: its kind is the effect's (SideEffect.task_kind), or it
   * states the figure the contract bounds their amount by (e.g. amount_cents).
   */
  askedFor(task: JsonObject): AskedEffect[] {
    return [...this.#effects.values()].flatMap((g) => {
      const field = g.amountTaskField;
      const stated = field !== undefined && task[field] != null && task[field] !== "";
      if (!stated && (g.taskKind === undefined || task.kind !== g.taskKind)) return [];
      return [
        {
          tool: g.tool.name,
          entity: g.entity,
          entityIds: declaredEntities(task, g.entity),
          field: field ?? "",
          figure: stated ? taskFigure(task, field) : undefined,
        },
      ];
    });
  }

  #guard(tool: RegisteredTool): GuardedEffect {
    const where = `irreversible ${tool.name} (${tool.method.parent.typeName}.${tool.method.name})`;
    const declared = methodPolicy(tool.method).sideEffect;
    const entity = declared?.entity ?? "";
    const taskKind = declared?.taskKind || undefined;
    const id = requestField(tool.method.input, FieldRole.ENTITY_ID, entity);
    if (!id)
      throw new Error(
        `${where} acts on entity "${entity}" but no request field has (field) = {role: FIELD_ROLE_ENTITY_ID, entity: "${entity}"}`,
      );
    const none = {
      amountField: undefined,
      boundField: undefined,
      amountTaskField: undefined,
      reader: undefined,
      risk: undefined,
    };
    if (!declared?.movesMoney) return { tool, entity, idField: id.jsonName, taskKind, movesMoney: false, ...none };
    const amount = requestField(tool.method.input, FieldRole.AMOUNT);
    if (!amount) throw new Error(`${where} moves money but no request field has (field).role = FIELD_ROLE_AMOUNT`);
    const bound = requestField(tool.method.input, FieldRole.AMOUNT_BOUND);
    if (!bound)
      throw new Error(
        `${where} moves money but no request field has (field).role = FIELD_ROLE_AMOUNT_BOUND: the tool could not refuse what exceeds the bound the host decided`,
      );
    const reader = this.#readers.get(entity);
    if (!reader)
      throw new Error(
        `${where} moves money but no method declares reads_entity "${entity}": the host could not read the ${entity} live before calling it`,
      );
    const missing = (["version", "moved", "available", "currency"] as const).filter((k) => reader[k] === undefined);
    if (missing.length > 0) {
      throw new Error(
        `${where} moves money but ${reader.tool.name}, the live read of "${entity}", gives no ${missing.join(", ")} (field roles ENTITY_VERSION, AMOUNT_MOVED, AMOUNT_AVAILABLE, CURRENCY)`,
      );
    }
    const amountPolicy = fieldPolicy(amount);
    const amountTaskField =
      amountPolicy.taskBound === TaskBound.AT_MOST && amountPolicy.taskField ? amountPolicy.taskField : undefined;
    const money = { amountField: amount.jsonName, boundField: bound.jsonName, amountTaskField, reader };
    for (const [linked, link] of reader.links) {
      const riskReader = this.#readers.get(linked);
      if (!riskReader?.riskScore) continue;
      if (riskReader.approvals.length === 0)
        throw new Error(
          `${where} moves money but ${riskReader.tool.name} gives a FIELD_ROLE_RISK_SCORE without (field).approval: the host has no threshold to compare it with`,
        );
      return {
        tool,
        entity,
        idField: id.jsonName,
        taskKind,
        movesMoney: true,
        ...money,
        risk: { link, reader: riskReader },
      };
    }
    throw new Error(
      `${where} moves money but the ${entity} read by ${reader.tool.name} links to no entity whose live read gives a FIELD_ROLE_RISK_SCORE: the host could not check the customer's risk`,
    );
  }

  /** The guards of an irreversible tool (every irreversible tool has them; others none). */
  effectOf(tool: RegisteredTool): GuardedEffect | undefined {
    return this.#effects.get(tool.name);
  }

  readerOf(entity: string): EntityReader | undefined {
    return this.#readers.get(entity);
  }
}

export function valueAt(data: JsonValue | undefined, path: Path): JsonValue | undefined {
  let current = data;
  for (const key of path) {
    if (current === null || typeof current !== "object" || Array.isArray(current)) return undefined;
    current = (current as JsonObject)[key];
  }
  return current;
}

/** The entities of `kind` a task names: "<kind>_id" (one) or "<kind>_ids" (a list), snake or camel case. */
export function declaredEntities(task: JsonObject, kind: string): string[] {
  const camel = kind.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
  const out: string[] = [];
  for (const key of [`${kind}_id`, `${camel}Id`]) {
    const v = task[key];
    if (typeof v === "string") out.push(v);
  }
  for (const key of [`${kind}_ids`, `${camel}Ids`]) {
    const v = task[key];
    if (Array.isArray(v)) out.push(...v.filter((x): x is string => typeof x === "string"));
  }
  return [...new Set(out)];
}
