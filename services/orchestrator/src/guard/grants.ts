// Who may give a session which scopes. A session acts with the scopes it is granted, so a caller
// may only grant what it holds itself — a scope, or "grant:<scope>" (the right to delegate it
// without using it) — and never an operator scope: those steer the orchestrator and the tools'
// drills, and no agent session should hold them. The operator scopes are read from the contracts
// (every scope the orchestrator's API or the tools' admin service requires, and every service's
// declared operator_scopes, e.g. sessions:admin), not listed by hand.
import { contractFiles } from "@loopguard/proto";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { type Caller, methodPolicy, servicePolicy, servicesOf } from "@loopguard/tool-sdk";

export const OPERATOR_SCOPES: ReadonlySet<string> = new Set([
  ...[...OrchestratorService.methods, ...ToolAdminService.methods]
    .map((m) => methodPolicy(m).requiredScope)
    .filter((s) => s !== ""),
  ...servicesOf(contractFiles).flatMap((service) => servicePolicy(service).operatorScopes),
]);

/** The prefix of a scope that lets its holder grant the rest to a session without holding it. */
export const GRANT_PREFIX = "grant:";

/** Why `caller` may not grant `scopes` to a session, naming the first scope refused; undefined when it may. */
export function refusedGrant(scopes: readonly string[], caller: Caller): { scope: string; why: string } | undefined {
  for (const scope of scopes) {
    if (OPERATOR_SCOPES.has(scope))
      return { scope, why: `"${scope}" is an operator scope and is never granted to a session` };
    if (!caller.scopes.has(scope) && !caller.scopes.has(`${GRANT_PREFIX}${scope}`)) {
      return {
        scope,
        why: `the caller (${caller.subject}) holds neither "${scope}" nor "${GRANT_PREFIX}${scope}", so it cannot grant it to a session`,
      };
    }
  }
  return undefined;
}
