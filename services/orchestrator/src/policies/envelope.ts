// The one builder of a failed call's result envelope: the host's own observations (EINVAL, ENOTOOL,
// EAPPROVAL), a tool's error and a policy's refusal alike.
import { redactText } from "../guard/redact.js";
import type { ResultEnvelope } from "./policy.js";

type EnvelopeError = NonNullable<ResultEnvelope["error"]>;

export interface FailureInput extends Omit<EnvelopeError, "retryable"> {
  /** Whether the same call may succeed later; false unless said. */
  readonly retryable?: boolean;
}

/** Its message may quote the model's arguments or a tool's words, so it is redacted. */
export function errorEnvelope(error: FailureInput, now: number, costMicros = 0): ResultEnvelope {
  return {
    ok: false,
    error: { ...error, message: redactText(error.message), retryable: error.retryable ?? false },
    refs: [],
    costMicros,
    servedFrom: "none",
    observedAt: new Date(now).toISOString(),
  };
}
