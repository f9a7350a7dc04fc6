// World references of a tool's answer — "<entity>:<id>@<version>", or "<entity>:<id>" without one —
// read from the contract's field roles: every message in the response holding an ENTITY_ID (with
// its ENTITY_VERSION when it has one) and every LINKED_ENTITY_ID. They are what answers cite,
// what approvals are bound to and what progress fingerprints compare; no tool is known by name.
import type { DescField, DescMessage } from "@bufbuild/protobuf";
import { FieldRole, fieldPolicy } from "@loopguard/tool-sdk";
import type { JsonObject, JsonValue } from "../store/session-store.js";

interface RefPlan {
  readonly id: { readonly field: string; readonly entity: string } | undefined;
  readonly version: string | undefined;
  readonly links: readonly { readonly field: string; readonly entity: string }[];
  /** Message-typed fields to look into, singular or repeated. */
  readonly children: readonly { readonly field: string; readonly message: DescMessage }[];
}

const plans = new WeakMap<DescMessage, RefPlan>();

function childOf(f: DescField): DescMessage | undefined {
  if (f.fieldKind === "message") return f.message;
  if (f.fieldKind === "list" && f.listKind === "message") return f.message;
  return undefined;
}

function planOf(message: DescMessage): RefPlan {
  const cached = plans.get(message);
  if (cached) return cached;
  let id: RefPlan["id"];
  let version: string | undefined;
  const links: { field: string; entity: string }[] = [];
  const children: { field: string; message: DescMessage }[] = [];
  for (const f of message.fields) {
    const policy = fieldPolicy(f);
    if (policy.role === FieldRole.ENTITY_ID && policy.entity) id = { field: f.jsonName, entity: policy.entity };
    else if (policy.role === FieldRole.ENTITY_VERSION) version = f.jsonName;
    else if (policy.role === FieldRole.LINKED_ENTITY_ID && policy.entity)
      links.push({ field: f.jsonName, entity: policy.entity });
    const child = childOf(f);
    if (child) children.push({ field: f.jsonName, message: child });
  }
  const plan = { id, version, links, children };
  plans.set(message, plan);
  return plan;
}

/** One entity an answer names or links to; `version` only when its message has an ENTITY_VERSION field set. */
interface EntityRef {
  readonly entity: string;
  readonly id: string;
  readonly version?: string;
}

function collect(message: DescMessage, value: JsonValue | undefined, out: EntityRef[]): void {
  if (value === null || value === undefined || typeof value !== "object") return;
  if (Array.isArray(value)) {
    for (const item of value) collect(message, item, out);
    return;
  }
  const obj = value as JsonObject;
  const plan = planOf(message);
  const id = plan.id ? obj[plan.id.field] : undefined;
  if (plan.id && id !== undefined && id !== null) {
    const version = plan.version ? obj[plan.version] : undefined;
    out.push(
      version === undefined || version === null
        ? { entity: plan.id.entity, id: String(id) }
        : { entity: plan.id.entity, id: String(id), version: String(version) },
    );
  }
  for (const link of plan.links) {
    const linked = obj[link.field];
    if (linked !== undefined && linked !== null) out.push({ entity: link.entity, id: String(linked) });
  }
  for (const child of plan.children) collect(child.message, obj[child.field], out);
}

function entityRefs(message: DescMessage, data: JsonValue | undefined): EntityRef[] {
  const out: EntityRef[] = [];
  collect(message, data, out);
  return out;
}

/** The world references of a response, given as the JSON of `message`. */
export function refsOf(message: DescMessage, data: JsonValue | undefined): string[] {
  return entityRefs(message, data).map((r) =>
    r.version === undefined ? `${r.entity}:${r.id}` : `${r.entity}:${r.id}@${r.version}`,
  );
}

/**
 * The entities of a response as "<entity>:<id>", versions left off: read from the fields, never
 * from refsOf's strings, since an id may itself hold "@" (a customer id is any 1..64 characters)
 * and "customer:a@b.example" is then no "customer:a" at version "b.example".
 */
export function entitiesOf(message: DescMessage, data: JsonValue | undefined): string[] {
  return entityRefs(message, data).map((r) => `${r.entity}:${r.id}`);
}
