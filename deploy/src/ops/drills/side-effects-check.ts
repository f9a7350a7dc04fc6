// What a plan's side-effects check is: the context it gets and the three moments it runs at.
import type { PersonRole } from "@loopguard/tool-sdk";
import type { OrchestratorApi } from "./orchestrator-api.js";
import type { SessionOutcome, SideEffectAudit } from "./report.js";
import type { PlannedSession } from "./session-plan.js";

/** What a plan's side-effects check works with. */
export interface CheckContext {
  readonly sessions: readonly PlannedSession[];
  /** A gRPC target over every pod of a service's live set, read when called (a release may move it). */
  readonly serviceApi: (service: string) => string;
  readonly token: (person: PersonRole, audience: string, scopes: string[]) => Promise<string>;
  /** The orchestrators' API as `person` with `scopes`, closed at the end of the run. */
  readonly orchestratorAs: (person: PersonRole, scopes: string[]) => Promise<OrchestratorApi>;
}

/** What a run checks beyond the sessions: read before the load, helped along beside it, judged after. */
export interface SideEffectsCheck {
  begin(): Promise<void>;
  /** Runs beside the load until `signal` aborts. */
  during(signal: AbortSignal): Promise<void>;
  end(outcomes: readonly SessionOutcome[]): Promise<SideEffectAudit>;
  readonly approvalsResolved: number;
}
