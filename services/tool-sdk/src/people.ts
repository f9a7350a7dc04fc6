// The people of a loopguard deployment and what each may do, read from the contracts: a requester
// starts sessions and grants them tool scopes, an approver answers approvals, an operator sees and
// runs everything but moves no money. The local suite makes one key per person with these scopes;
// an OIDC person gets the scopes of the roles its ID token names.
import { contractFiles } from "@loopguard/proto";
import { Effect, methodPolicy, requiredScopesOf, servicePolicy, servicesOf, toolServicesOf } from "./contract.js";

export const PEOPLE = ["requester", "approver", "operator"] as const;
export type PersonRole = (typeof PEOPLE)[number];

/** Every scope an irreversible method requires, with the method ("<tool>.<Method>") that requires it. */
export function irreversibleScopes(): ReadonlyMap<string, string> {
  const out = new Map<string, string>();
  for (const service of servicesOf(contractFiles)) {
    for (const method of service.methods) {
      const policy = methodPolicy(method);
      if (policy.effect === Effect.IRREVERSIBLE_EXTERNAL && policy.requiredScope)
        out.set(policy.requiredScope, `${servicePolicy(service).toolName}.${method.name}`);
    }
  }
  return out;
}

/** The irreversible method whose scope `scope` is, or covers (a pattern such as "*" or "<tool>:*"). */
export function irreversibleMethodOf(scope: string): string | undefined {
  for (const [needed, method] of irreversibleScopes()) {
    if (scope === needed || (scope.endsWith("*") && needed.startsWith(scope.slice(0, -1)))) return method;
  }
  return undefined;
}

/** What the orchestrator's key may sign: every tool method's scope (for its sessions' tool calls). */
export function orchestratorScopes(): readonly string[] {
  return requiredScopesOf(toolServicesOf(contractFiles));
}

/** The scopes of the tools' read-only methods, none an irreversible method's too: what may be read without acting. */
export function readOnlyToolScopes(): readonly string[] {
  const irreversible = irreversibleScopes();
  const readOnly = toolServicesOf(contractFiles).flatMap((s) =>
    s.methods.map(methodPolicy).filter((p) => p.effect === Effect.READ_ONLY && p.requiredScope !== ""),
  );
  return [...new Set(readOnly.map((p) => p.requiredScope))].filter((s) => !irreversible.has(s));
}

/** The subject the release's synthetic checks (smoke calls) claim, with a probe key of their own. */
export const SMOKE_SUBJECT = "release-smoke";

/** The scopes of each person role. None holds an irreversible method's scope: only the orchestrator moves money, bound to one request. */
export function personScopes(): Readonly<Record<PersonRole, readonly string[]>> {
  const tools = toolServicesOf(contractFiles);
  return {
    requester: ["sessions:read", "sessions:write", ...requiredScopesOf(tools).map((s) => `grant:${s}`)],
    approver: ["sessions:read", "approvals:write"],
    // patrol:report: the patrol (`pnpm patrol`) records its runs as the operator; it starts and approves as the others.
    operator: [
      "sessions:read",
      "sessions:write",
      "sessions:admin",
      "tool:admin",
      "patrol:report",
      ...readOnlyToolScopes(),
    ],
  };
}
