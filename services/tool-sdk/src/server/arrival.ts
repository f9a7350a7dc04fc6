// How long a gRPC caller's deadline gave its call, noted as grpc-js reads the call's headers and sets
// its deadline from their grpc-timeout: the handler runs once the message is read too, which on a
// busy server can be much later, and that wait is the server's, not a short deadline of the caller's.
import { type Metadata, ServerInterceptingCall, type ServerInterceptor } from "@grpc/grpc-js";

// Keyed by the call's own metadata object, which grpc-js hands the handler: nothing a caller sends can set it.
const timeouts = new WeakMap<Metadata, number>();

export const arrivalInterceptor: ServerInterceptor = (_method, call) => {
  const deadline = call.getDeadline();
  const deadlineMs = deadline instanceof Date ? deadline.getTime() : deadline;
  const timeoutMs = Number.isFinite(deadlineMs) ? Math.max(0, deadlineMs - Date.now()) : undefined;
  return new ServerInterceptingCall(call, {
    start: (next) =>
      next({
        onReceiveMetadata: (metadata, pass) => {
          if (timeoutMs !== undefined) timeouts.set(metadata, timeoutMs);
          pass(metadata);
        },
      }),
  });
};

/** The call's timeout as it arrived; undefined without a deadline (or on a server without arrivalInterceptor). */
export function timeoutOf(metadata: Metadata): number | undefined {
  return timeouts.get(metadata);
}
