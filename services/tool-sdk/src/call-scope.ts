// The deadline of the call being served, visible to any tool call the handler makes, so
// outgoing calls never outlive the incoming one (deadline propagation).
import { AsyncLocalStorage } from "node:async_hooks";

interface CallScope {
  readonly deadline: Date | undefined;
}

const storage = new AsyncLocalStorage<CallScope>();

export function runInCallScope<T>(deadline: Date | undefined, fn: () => T): T {
  return storage.run({ deadline }, fn);
}

export function currentCallDeadline(): Date | undefined {
  return storage.getStore()?.deadline;
}
