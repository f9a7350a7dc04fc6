// At most so many calls of a tool in flight, so many more queued; beyond that RESOURCE_EXHAUSTED.
import { status } from "@grpc/grpc-js";
import { BulkheadRejectedError, type BulkheadPolicy } from "cockatiel";
import { CallError } from "../call-error.js";
import type { ClientInterceptor } from "../chain.js";

export function bulkheadStage(policy: BulkheadPolicy): ClientInterceptor {
  return (next) => (call) =>
    policy
      .execute(() => next(call))
      .catch((thrown: unknown) => {
        if (!(thrown instanceof BulkheadRejectedError)) throw thrown;
        throw new CallError({
          code: status.RESOURCE_EXHAUSTED,
          reason: "BULKHEAD_FULL",
          message: `${call.target.tool}: too many calls in flight`,
          attempts: 0,
          tool: call.target.tool,
          method: call.target.method.name,
        });
      });
}
