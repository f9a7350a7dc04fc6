// Reads method and service semantics from the contract's custom options, the one source of
// truth for effect, scope, SLA, cost, routing tags, degradation and the closed error reasons.
import {
  type DescEnum,
  type DescField,
  type DescFile,
  type DescMessage,
  type DescMethod,
  type DescService,
  getOption,
} from "@bufbuild/protobuf";
import { file_loopguard_tool_v1_errors } from "@loopguard/proto/gen/loopguard/tool/v1/errors_pb";
import {
  Degradation,
  Effect,
  type FieldPolicy,
  FieldRole,
  field as fieldOption,
  type MethodPolicy,
  RoutingTag,
  type ServicePolicy,
  method as methodOption,
  service as serviceOption,
  TaskBound,
} from "@loopguard/proto/gen/loopguard/tool/v1/options_pb";

export { Degradation, Effect, FieldRole, RoutingTag, TaskBound };
export type { FieldPolicy, MethodPolicy, ServicePolicy };

/** What a field means to the host's side-effect rules; role UNSPECIFIED when the contract says nothing. */
export function fieldPolicy(field: DescField): FieldPolicy {
  return getOption(field, fieldOption);
}

export function servicePolicy(service: DescService): ServicePolicy {
  const policy = getOption(service, serviceOption);
  if (!policy.toolName) {
    throw new Error(`contract ${service.typeName} lacks option (loopguard.tool.v1.service).tool_name`);
  }
  return policy;
}

export function methodPolicy(method: DescMethod): MethodPolicy {
  const policy = getOption(method, methodOption);
  if (policy.effect === Effect.UNSPECIFIED || !policy.sla || policy.sla.timeoutMs === 0) {
    throw new Error(`contract method ${method.parent.typeName}.${method.name} lacks effect or SLA options`);
  }
  if (policy.effect === Effect.IRREVERSIBLE_EXTERNAL && !policy.idempotencyKeyField) {
    throw new Error(`irreversible method ${method.parent.typeName}.${method.name} must name its idempotency_key_field`);
  }
  if (policy.effect === Effect.IRREVERSIBLE_EXTERNAL && !policy.sideEffect?.entity) {
    throw new Error(
      `irreversible method ${method.parent.typeName}.${method.name} must declare its side_effect (the entity it acts on, whether it moves money)`,
    );
  }
  // A hedge puts a second copy of the call in flight at once: harmless for a read, a double write otherwise.
  if (policy.hedge?.enabled && policy.effect !== Effect.READ_ONLY) {
    throw new Error(
      `method ${method.parent.typeName}.${method.name} sets option hedge but is not EFFECT_READ_ONLY: only reads may be hedged`,
    );
  }
  return policy;
}

/**
 * The time a method is held to: its SLA's p95 target (a healthy server answers within it 19 calls in
 * 20), or the timeout (a client's own, where it sets one) when that is shorter or the SLA names no
 * target. A caller's deadline that leaves less is no measure of the server: the client's breaker
 * (`cutShort`, client/stages/deadline.ts) and the server's metrics (server/stages.ts) both judge by it.
 */
export function latencyObjectiveMs(method: DescMethod, timeoutMs = methodPolicy(method).sla!.timeoutMs): number {
  return Math.min(timeoutMs, methodPolicy(method).sla!.p95TargetMs || timeoutMs);
}

/** Largest request of a method whose contract declares no max_request_bytes. */
export const DEFAULT_MAX_REQUEST_BYTES = 16 * 1024;

/** The largest encoded request a method accepts: its max_request_bytes, or the default. */
export function maxRequestBytesOf(method: DescMethod): number {
  return methodPolicy(method).maxRequestBytes || DEFAULT_MAX_REQUEST_BYTES;
}

/** "/loopguard.kb.v1.KbSearchService/Search" */
export function methodPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

/**
 * The wire reasons (google.rpc.ErrorInfo.reason) of an error-reason enum: each value's name
 * without the enum's prefix, e.g. RISK_ERROR_REASON_USER_NOT_FOUND → USER_NOT_FOUND.
 */
function reasonsOf(enumDesc: DescEnum): string[] {
  return enumDesc.values
    .filter((v) => v.number !== 0)
    .map((v) => v.name.slice(enumDesc.sharedPrefix ? enumDesc.sharedPrefix.length : 0));
}

const commonEnum: DescEnum = (() => {
  const found = file_loopguard_tool_v1_errors.enums[0];
  if (!found) throw new Error("loopguard.tool.v1.CommonErrorReason missing from the contracts");
  return found;
})();
export const commonReasons: ReadonlySet<string> = new Set(reasonsOf(commonEnum));

/** The closed set of reasons a service may put in ErrorInfo: its own enum plus the common one. */
function findEnum(file: DescFile, typeName: string): DescEnum | undefined {
  return (
    file.enums.find((e) => e.typeName === typeName) ?? file.dependencies.map((d) => findEnum(d, typeName)).find(Boolean)
  );
}

const reasonCache = new WeakMap<DescService, ReadonlySet<string>>();

export function errorReasons(service: DescService): ReadonlySet<string> {
  const cached = reasonCache.get(service);
  if (cached) return cached;
  const { errorReasonEnum } = servicePolicy(service);
  const own = errorReasonEnum === commonEnum.typeName ? commonEnum : findEnum(service.file, errorReasonEnum);
  if (!own)
    throw new Error(`error reason enum ${errorReasonEnum} of ${service.typeName} is not in its file or imports`);
  const reasons = new Set([...commonReasons, ...reasonsOf(own)]);
  reasonCache.set(service, reasons);
  return reasons;
}

/**
 * The one service a token carrying `scopes` is for, read from the contracts: the services whose
 * methods require each scope, intersected. The admin service's scope is served beside every tool,
 * and a scope no method requires (e.g. "grant:<scope>", which the orchestrator reads from its
 * callers' tokens), so neither narrows anything. Undefined when the scopes fit no single service.
 */
export function audienceOf(scopes: readonly string[], services: readonly DescService[]): string | undefined {
  let candidates: Set<string> | undefined;
  const everyTool = new Set(services.map((s) => servicePolicy(s).toolName));
  for (const scope of scopes) {
    const serving = new Set<string>();
    for (const service of services) {
      if (service.methods.some((m) => methodPolicy(m).requiredScope === scope))
        serving.add(servicePolicy(service).toolName);
    }
    const fits = serving.has(ADMIN_TOOL_NAME) || serving.size === 0 ? everyTool : serving;
    candidates = candidates ? new Set([...candidates].filter((c) => fits.has(c))) : fits;
  }
  candidates?.delete(ADMIN_TOOL_NAME);
  return candidates?.size === 1 ? [...candidates][0] : undefined;
}

/** The tool name of loopguard.tool.v1.ToolAdminService, which every tool serves beside its own contract. */
export const ADMIN_TOOL_NAME = "tool-admin";

/** Every service of the given contract files that carries a ServicePolicy. */
export function servicesOf(files: readonly DescFile[]): DescService[] {
  return files.flatMap((f) => f.services).filter((s) => getOption(s, serviceOption).toolName !== "");
}

/** The orchestrator's own contract's tool name: a ServicePolicy, but not a tool sessions call. */
export const ORCHESTRATOR_TOOL_NAME = "orchestrator";

/** The tool services among the contracts: every service with a ServicePolicy but the orchestrator's and the admin service. */
export function toolServicesOf(files: readonly DescFile[]): DescService[] {
  return servicesOf(files).filter(
    (s) => ![ORCHESTRATOR_TOOL_NAME, ADMIN_TOOL_NAME].includes(servicePolicy(s).toolName),
  );
}

/** Every scope a method of these services requires, in contract order (the scopes a session may be granted). */
export function requiredScopesOf(services: readonly DescService[]): string[] {
  return [
    ...new Set(
      services.flatMap((s) => s.methods.map((m) => methodPolicy(m).requiredScope)).filter((scope) => scope !== ""),
    ),
  ];
}

/** Every message the methods of these services take or give, and the messages inside them. */
function messagesOf(services: readonly DescService[]): DescMessage[] {
  const seen = new Set<DescMessage>();
  const visit = (message: DescMessage): void => {
    if (seen.has(message)) return;
    seen.add(message);
    for (const f of message.fields) if (f.message) visit(f.message);
  };
  for (const method of services.flatMap((s) => s.methods)) {
    visit(method.input);
    visit(method.output);
  }
  return [...seen];
}

/** The field names (as protobuf spells them, in snake case) these services declare log_safe. */
export function logSafeFieldsOf(services: readonly DescService[]): ReadonlySet<string> {
  return new Set(
    messagesOf(services).flatMap((m) => m.fields.filter((f) => fieldPolicy(f).logSafe).map((f) => f.name)),
  );
}

/** How an answer cites one kind of entity: by its id (which starts with `idPrefix`) or as "[<id>@<version>]". */
export interface CitationRule {
  readonly entity: string;
  readonly idPrefix: string;
  readonly atVersion: boolean;
}

const ID_PREFIX = /^[A-Za-z0-9_-]+$/;

/** The citation of every entity kind these services' messages declare one for; throws naming a field whose citation cannot work. */
export function citationsOf(services: readonly DescService[]): CitationRule[] {
  const rules = new Map<string, CitationRule>();
  for (const message of messagesOf(services)) {
    for (const f of message.fields) {
      const { role, entity, citation } = fieldPolicy(f);
      if (!citation) continue;
      const where = `${message.typeName}.${f.name}`;
      if (role !== FieldRole.ENTITY_ID || !entity)
        throw new Error(`${where} declares a citation but is not a FIELD_ROLE_ENTITY_ID field naming its entity`);
      if ((citation.idPrefix !== "") === citation.atVersion)
        throw new Error(`${where} must set exactly one of citation.id_prefix and citation.at_version`);
      if (citation.idPrefix && !ID_PREFIX.test(citation.idPrefix))
        throw new Error(`${where} citation.id_prefix must be letters, digits, "_" or "-"`);
      if (citation.atVersion && !message.fields.some((g) => fieldPolicy(g).role === FieldRole.ENTITY_VERSION))
        throw new Error(`${where} cites at_version but ${message.typeName} has no FIELD_ROLE_ENTITY_VERSION field`);
      rules.set(entity, { entity, idPrefix: citation.idPrefix, atVersion: citation.atVersion });
    }
  }
  return [...rules.values()];
}

/** A response field compared with an approval threshold: the setting the operator sets it by, its default and largest value. */
export interface ApprovalField {
  readonly setting: string;
  readonly defaultThreshold: number;
  readonly maxThreshold: number;
}

const SETTING = /^[a-z][a-z0-9_]*$/;

/** The approval setting a field declares, or undefined; throws when the declaration cannot be read as a threshold. */
export function approvalOf(field: DescField): ApprovalField | undefined {
  const approval = fieldPolicy(field).approval;
  if (!approval) return undefined;
  const where = `${field.parent.typeName}.${field.name}`;
  const declared = {
    setting: approval.setting,
    defaultThreshold: Number(approval.defaultThreshold),
    maxThreshold: Number(approval.maxThreshold),
  };
  if (!SETTING.test(declared.setting))
    throw new Error(`${where} approval.setting must be lower-case letters, digits and "_", got "${declared.setting}"`);
  if (declared.defaultThreshold < 0 || declared.defaultThreshold > declared.maxThreshold)
    throw new Error(`${where} approval.default_threshold must be within 0..max_threshold`);
  return declared;
}

/** Every approval setting these services declare, once each; throws when two fields declare one setting differently. */
export function approvalFieldsOf(services: readonly DescService[]): ApprovalField[] {
  const settings = new Map<string, ApprovalField>();
  for (const f of messagesOf(services).flatMap((m) => m.fields)) {
    const declared = approvalOf(f);
    if (!declared) continue;
    const earlier = settings.get(declared.setting);
    if (
      earlier &&
      (earlier.defaultThreshold !== declared.defaultThreshold || earlier.maxThreshold !== declared.maxThreshold)
    )
      throw new Error(`approval setting "${declared.setting}" is declared twice with different thresholds`);
    settings.set(declared.setting, declared);
  }
  return [...settings.values()];
}
