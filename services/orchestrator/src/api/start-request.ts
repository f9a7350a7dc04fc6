// What a StartSession request must satisfy beyond its contract's field rules, and its identity
// for idempotency: a task small and shallow enough to store and show, and a hash of the whole
// canonical request so a reused idempotency key with any other request is caught; and the start
// as the Orchestrator takes it.
import { createHash } from "node:crypto";
import { create, toJson } from "@bufbuild/protobuf";
import {
  type StartSessionRequest,
  StartSessionRequestSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import canonicalize from "canonicalize";
import type { BudgetLimits, JsonObject, JsonValue } from "../store/session-store.js";

/** A start as the Orchestrator takes it: the request's fields and who asked. */
export interface StartInput {
  readonly goal: string;
  readonly task: JsonObject;
  readonly budget: Partial<BudgetLimits>;
  readonly scopes: readonly string[];
  readonly policy: string;
  readonly idempotencyKey?: string;
  /** The caller's authenticated subject. */
  readonly createdBy: string;
  /** Hash of the canonical request, compared when the idempotency key matches an earlier start. */
  readonly requestHash: string;
  /** The caller's call (see NewSession.signal). */
  readonly signal?: AbortSignal;
}

export const MAX_TASK_BYTES = 16 * 1024;
export const MAX_TASK_DEPTH = 8;

/** How deep a value nests, measured without recursion: one nested past the stack (100,000 levels) is measured too. */
export function depthOf(value: JsonValue): number {
  let deepest = 0;
  const stack: [JsonValue, number][] = [[value, 0]];
  for (let next = stack.pop(); next; next = stack.pop()) {
    const [v, depth] = next;
    if (v === null || typeof v !== "object") continue;
    deepest = Math.max(deepest, depth + 1);
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/**
 * What in a value JSON cannot carry as written, or PostgreSQL cannot store: a number that is not
 * finite (NaN, ±Infinity: JSON has none, and JSON.stringify would write null), or a NUL (U+0000)
 * in a string or a key.
 */
function unstorable(value: JsonValue): string | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? undefined : "a number that is not finite";
  if (typeof value === "string") return value.includes("\0") ? "a NUL character (U+0000)" : undefined;
  if (value === null || typeof value !== "object") return undefined;
  if (Array.isArray(value)) return value.map(unstorable).find((found) => found !== undefined);
  for (const [key, child] of Object.entries(value)) {
    const found = key.includes("\0") ? "a NUL character (U+0000) in a key" : unstorable(child);
    if (found) return found;
  }
  return undefined;
}

/** Why the task cannot be accepted (too large, too deep, or holding what cannot be stored), or undefined. */
export function taskProblem(task: JsonValue): string | undefined {
  // The depth first: JSON.stringify recurses, and a value nested deep enough overflows its stack.
  const depth = depthOf(task);
  if (depth > MAX_TASK_DEPTH) return `the task nests ${depth} levels deep; at most ${MAX_TASK_DEPTH} are accepted`;
  const bytes = Buffer.byteLength(JSON.stringify(task));
  if (bytes > MAX_TASK_BYTES) return `the task is ${bytes} bytes of JSON; at most ${MAX_TASK_BYTES} are accepted`;
  const held = unstorable(task);
  if (held) return `the task holds ${held}`;
  // A dry run must be unmistakable: "false" or 1 would leave a patrol's money calls live.
  if (
    task &&
    typeof task === "object" &&
    !Array.isArray(task) &&
    "dry_run" in task &&
    typeof task.dry_run !== "boolean"
  )
    return "the task's dry_run must be true or false";
  return undefined;
}

/** SHA-256 of the request as canonical JSON (RFC 8785), its idempotency key left out. */
export function startRequestHash(request: StartSessionRequest): string {
  const json = toJson(StartSessionRequestSchema, create(StartSessionRequestSchema, { ...request, idempotencyKey: "" }));
  return createHash("sha256")
    .update(canonicalize(json) ?? "")
    .digest("hex");
}
