// The orchestrator's API errors: a reason from the contract's closed set, mapped to a status by the API handlers.
export class OrchestratorError extends Error {
  constructor(
    readonly reason:
      | "SESSION_NOT_FOUND"
      | "SESSION_TERMINAL"
      | "APPROVAL_MISMATCH"
      | "APPROVAL_EXPIRED"
      | "UNKNOWN_POLICY"
      | "SELF_APPROVAL"
      | "CALL_IN_FLIGHT"
      | "NOT_SESSION_OWNER",
    message: string,
  ) {
    super(message);
  }
}
