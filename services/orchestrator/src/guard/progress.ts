// No-progress detection: a fingerprint of action + observation + world version per tool step;
// a window of identical fingerprints means the agent is going round in circles.
import { createHash } from "node:crypto";

export const NO_PROGRESS_WINDOW = 3;

export function fingerprint(tool: string, argumentsJson: string, outcome: string, refs: readonly string[]): string {
  return createHash("sha256")
    .update(JSON.stringify([tool, argumentsJson, outcome, [...refs].sort()]))
    .digest("hex")
    .slice(0, 16);
}

/** True when the last `window` fingerprints are all the same. */
export function isStuck(fingerprints: readonly string[], window = NO_PROGRESS_WINDOW): boolean {
  if (fingerprints.length < window) return false;
  const tail = fingerprints.slice(-window);
  return tail.every((f) => f === tail[0]);
}

export function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}
