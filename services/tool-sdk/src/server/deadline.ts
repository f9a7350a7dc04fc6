// Whose doing the end of a call at its deadline is, in one place for both transports: the tool's
// (DEADLINE_EXCEEDED, a server fault) or its caller's (CANCELLED). grpc_server_handled_total counts
// that code, so an outage must not hide as cancels, nor a caller's short deadlines page for a healthy tool.
import { status, ToolError } from "../errors.js";
import type { ServerCall } from "./interceptor.js";

/**
 * What a caller's deadline may lose on its way here, as a share of the call's time: the server's
 * deadline starts when it reads the call's headers, a while after the caller fixed its own (up to
 * 17 ms measured with caller and server sharing one event loop, 8 calls at once; 53 ms with four
 * such processes on two cores; over 100 ms for a batch of 8 calls with a whole test suite on two
 * cores), so its cancel at its deadline can arrive that much before the server's. A quarter: a
 * cancel early in a call stays a cancel, and one in its last quarter comes from a caller that waited
 * three quarters of its deadline, which for a deadline that covered the latency objective is a tool
 * already late.
 */
export const DEADLINE_TRIP_SHARE = 0.25;

/**
 * What a deadline loses before it is written into the headers as a timeout (which the server reads
 * unchanged, whatever the network's delay): the caller's own stages and grpc-js between fixing it
 * and sending (a few ms on an idle machine, up to 28 ms measured on an overloaded one). A caller that means its
 * deadline to be the method's objective is not taken for one that cuts it short.
 */
export const TIMEOUT_SENDING_MS = 10;

export function deadlinePassed(): ToolError {
  return new ToolError(status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", "the deadline passed");
}

/**
 * The end of a call whose caller went away at `now`: DEADLINE_EXCEEDED when its deadline had passed,
 * but for its trip, whoever noticed first (grpc-js ends such a call itself and reports it
 * cancelled, usually before the deadline stage's timer fires), CANCELLED otherwise.
 */
export function cancelledAt(call: Pick<ServerCall, "deadline" | "timeoutMs">, now = Date.now()): ToolError {
  return call.deadline !== undefined && now >= call.deadline.getTime() - (call.timeoutMs ?? 0) * DEADLINE_TRIP_SHARE
    ? deadlinePassed()
    : new ToolError(status.CANCELLED, "CALL_CANCELLED", "the caller cancelled the call");
}

/**
 * Whether the caller's deadline, as the call arrived with `timeoutMs`, left the method less than
 * its latency objective (`latencyObjectiveMs`): a healthy tool misses many such deadlines, so their
 * expiry is the caller's doing.
 */
export function cutShort(timeoutMs: number | undefined, objectiveMs: number): boolean {
  return timeoutMs !== undefined && timeoutMs + TIMEOUT_SENDING_MS < objectiveMs;
}
