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

function depthOf(value: JsonValue): number {
  if (value === null || typeof value !== "object") return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce<number>((deepest, child) => Math.max(deepest, depthOf(child)), 0);
}

/** Why the task cannot be accepted (too large or too deep), or undefined. */
export function taskProblem(task: JsonValue): string | undefined {
  const bytes = Buffer.byteLength(JSON.stringify(task));
  if (bytes > MAX_TASK_BYTES) return `the task is ${bytes} bytes of JSON; at most ${MAX_TASK_BYTES} are accepted`;
  const depth = depthOf(task);
  if (depth > MAX_TASK_DEPTH) return `the task nests ${depth} levels deep; at most ${MAX_TASK_DEPTH} are accepted`;
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
