// The tools a session may call, derived from the contracts alone: every unary method of the
// given services, with its semantics read from the method options. There is no second,
// hand-kept list of tools to drift from the contracts.
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import {
  type CitationRule,
  citationsOf,
  type Degradation,
  Effect,
  FieldRole,
  fieldPolicy,
  maxRequestBytesOf,
  methodPolicy,
  type RoutingTag,
  servicePolicy,
  toolServicesOf,
} from "@loopguard/tool-sdk";
import { requestSchema } from "./policies/json-schema.js";
import { type PersonalField, personalFieldsOf } from "./guard/personal-data.js";
import type { ToolSpec } from "./policies/policy.js";
import type { JsonObject } from "./store/session-store.js";

/** Every tool service among the contracts (`contractFiles`). */
export const DEFAULT_TOOL_SERVICES: readonly DescService[] = toolServicesOf(contractFiles);

export interface RegisteredTool {
  /** Model-visible name: "<tool>_<method in snake case>". */
  readonly name: string;
  readonly service: DescService;
  readonly method: DescMethod;
  /** The service's tool name from its contract; used in metrics and logs. */
  readonly tool: string;
  readonly effect: Effect;
  /** Scope the session's token must carry; "" means any authenticated caller. */
  readonly requiredScope: string;
  readonly timeoutMs: number;
  readonly costMicros: number;
  /** JSON name of the request field carrying the idempotency key; the host fills it in. */
  readonly idempotencyKeyField: string | undefined;
  /** JSON names of the request fields only the host fills (the idempotency key, the amount bound): never shown to or taken from the model. */
  readonly hostFields: ReadonlySet<string>;
  /**
   * Request fields with FIELD_ROLE_DRY_RUN, by JSON name, with the task field that sets them: the host
   * sets each to true when the task's field is true (a dry run the model cannot turn off).
   */
  readonly dryRunFields: readonly { readonly field: string; readonly taskField: string }[];
  /** Request fields that take personal data: the model names them by placeholder, the host fills in the task's value. */
  readonly personalFields: readonly PersonalField[];
  /** The largest request the tool accepts (the contract's max_request_bytes); larger arguments are refused before they are parsed. */
  readonly maxRequestBytes: number;
  readonly degradation: Degradation;
  readonly tags: readonly RoutingTag[];
  readonly spec: ToolSpec;
}

/** The dry-run fields of `tool` that `task` sets (its task field true): the host sets each to true in every call. */
export function dryFieldsOf(tool: Pick<RegisteredTool, "dryRunFields">, task: JsonObject): string[] {
  return tool.dryRunFields.filter((f) => task[f.taskField] === true).map((f) => f.field);
}

/** OpenAI-compatible function names: what every policy can send back verbatim. */
const MODEL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

export class ToolRegistry {
  readonly #tools: ReadonlyMap<string, RegisteredTool>;
  /** How answers cite the entities these tools return (their contracts' citation options). */
  readonly citations: readonly CitationRule[];

  /** Throws when a contract lacks the options a tool needs, or two methods map to one name. */
  constructor(services: readonly DescService[] = DEFAULT_TOOL_SERVICES) {
    const tools = new Map<string, RegisteredTool>();
    for (const service of services) {
      const toolName = servicePolicy(service).toolName;
      for (const method of service.methods) {
        if (method.methodKind !== "unary") continue;
        const registered = registerMethod(toolName, service, method);
        const clash = tools.get(registered.name);
        if (clash) {
          throw new Error(
            `tools ${clash.method.parent.typeName}.${clash.method.name} and ${service.typeName}.${method.name} share the name ${registered.name}`,
          );
        }
        tools.set(registered.name, registered);
      }
    }
    this.#tools = tools;
    this.citations = citationsOf(services);
  }

  list(): RegisteredTool[] {
    return [...this.#tools.values()];
  }

  get(name: string): RegisteredTool | undefined {
    return this.#tools.get(name);
  }

  /** What the policy is shown; with `scopes`, only the tools a session holding them may call. */
  specs(scopes?: readonly string[]): ToolSpec[] {
    const granted = scopes ? new Set(scopes) : undefined;
    return this.list()
      .filter((t) => !granted || t.requiredScope === "" || granted.has(t.requiredScope))
      .map((t) => t.spec);
  }
}

function registerMethod(toolName: string, service: DescService, method: DescMethod): RegisteredTool {
  const policy = methodPolicy(method);
  const where = `${service.typeName}.${method.name}`;
  const name = `${toolName.replaceAll("-", "_")}_${snakeCase(method.name)}`;
  if (!MODEL_NAME.test(name)) throw new Error(`tool name ${name} of ${where} is not a valid function name`);
  if (!policy.description) throw new Error(`contract method ${where} lacks a description for the model`);

  let idempotencyKeyField: string | undefined;
  if (policy.idempotencyKeyField) {
    const keyField = method.input.fields.find((f) => f.name === policy.idempotencyKeyField);
    if (!keyField)
      throw new Error(
        `idempotency_key_field ${policy.idempotencyKeyField} of ${where} is not a field of ${method.input.typeName}`,
      );
    idempotencyKeyField = keyField.jsonName;
  }

  const dryRunFields = method.input.fields
    .filter((f) => fieldPolicy(f).role === FieldRole.DRY_RUN)
    .map((f) => ({ field: f.jsonName, taskField: fieldPolicy(f).taskField || "dry_run" }));
  const hostFields = new Set([
    ...(idempotencyKeyField ? [idempotencyKeyField] : []),
    ...method.input.fields.filter((f) => fieldPolicy(f).role === FieldRole.AMOUNT_BOUND).map((f) => f.jsonName),
    ...dryRunFields.map((f) => f.field),
  ]);
  const irreversible = policy.effect === Effect.IRREVERSIBLE_EXTERNAL;
  return {
    name,
    service,
    method,
    tool: toolName,
    effect: policy.effect,
    requiredScope: policy.requiredScope,
    timeoutMs: policy.sla?.timeoutMs ?? 0,
    costMicros: Number(policy.cost?.microsPerCall ?? 0n),
    idempotencyKeyField,
    hostFields,
    dryRunFields,
    personalFields: personalFieldsOf(method),
    maxRequestBytes: maxRequestBytesOf(method),
    degradation: policy.degradation,
    tags: [...policy.tags],
    spec: {
      name,
      description: irreversible ? `${policy.description} (irreversible; may need human approval)` : policy.description,
      parameters: requestSchema(method.input, { omit: [...hostFields] }),
    },
  };
}

/** "GetOrder" → "get_order", "GetHTTPStatus" → "get_http_status". */
function snakeCase(pascal: string): string {
  return pascal
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1_$2")
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase();
}
