// Which failures park a session and when a parked call is tried again: pure rules, shared by the
// runner's park and the side-effect guard.
import { backoffDelayMs, status, type CallError } from "@loopguard/tool-sdk";
import type { RegisteredTool } from "../tool-registry.js";

/** The first wait; each park of the same call doubles it, up to PARK_MAX_MS. */
export const PARK_BASE_MS = 1000;
export const PARK_MAX_MS = 15_000;

/** Codes that say the tool cannot answer now, not that the request is wrong. */
const PASSING: ReadonlySet<number> = new Set([status.UNAVAILABLE, status.RESOURCE_EXHAUSTED, status.DEADLINE_EXCEEDED]);

export function passes(error: Pick<CallError, "code">): boolean {
  return PASSING.has(error.code);
}

/** The same, for a code as an envelope names it ("UNAVAILABLE"). */
export function passesByName(code: string): boolean {
  const value = (status as unknown as Record<string, unknown>)[code];
  return typeof value === "number" && PASSING.has(value);
}

/** What failed, as the park record and answers say it: "UNAVAILABLE BREAKER_OPEN". */
export function failureName(error: Pick<CallError, "code" | "reason">): string {
  return `${status[error.code] ?? error.code}${error.reason ? ` ${error.reason}` : ""}`;
}

/**
 * When a call parked `attempts` times before is tried again: doubling backoff with equal jitter
 * (half fixed, half random, so that parked sessions spread out but none comes back at once), and
 * never before the tool's RetryInfo.
 */
export function wakeTime(
  now: number,
  attempts: number,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): number {
  const backoff = backoffDelayMs({ baseMs: PARK_BASE_MS, maxMs: PARK_MAX_MS, jitter: "equal" }, attempts + 1, random);
  return now + Math.max(retryAfterMs ?? 0, Math.round(backoff));
}

/** What a session is waiting for, for the reason it parks with. */
export interface WaitFor {
  readonly tool: RegisteredTool;
  readonly reason: string;
  readonly retryAfterMs?: number | undefined;
  /** The failed call's attempts: those past the first spent the session's retry budget. */
  readonly attempts?: number;
}
