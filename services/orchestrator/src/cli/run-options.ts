// What the command line's options say, read and checked: a task (JSON, inline or from a file), a
// budget (key=integer pairs), a state to list. A bad value is a UsageError naming the option.
import { closeSync, openSync, readSync } from "node:fs";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { jsonParseReason } from "@loopguard/tool-sdk";
import { MAX_TASK_BYTES, taskProblem } from "../api/start-request.js";
import type { JsonValue } from "../store/session-store.js";
import { UsageError } from "./identity.js";

const BUDGET_KEYS: Record<string, string> = {
  steps: "maxSteps",
  tool_calls: "maxToolCalls",
  tokens: "maxTokens",
  wall_clock_ms: "maxWallClockMs",
  cost_micros: "maxCostMicros",
  retries: "maxRetries",
};

/** A task file this large is refused before it is read: the task itself may hold MAX_TASK_BYTES of JSON, laid out however. */
const MAX_TASK_FILE_BYTES = 64 * MAX_TASK_BYTES;

export function readTask(values: { task?: string; "task-file"?: string }): Record<string, unknown> {
  let raw: string | undefined = values.task;
  const file = values["task-file"];
  if (file !== undefined) {
    if (raw !== undefined) throw new UsageError("give --task or --task-file, not both");
    if (file === "") throw new UsageError("--task-file: the path is empty");
    raw = readTaskFile(file);
  }
  if (raw === undefined) return {};
  let task: unknown;
  try {
    task = JSON.parse(raw);
  } catch (error) {
    throw new UsageError(`the task is not valid JSON (${jsonParseReason(error)})`);
  }
  if (!task || typeof task !== "object" || Array.isArray(task)) throw new UsageError("the task must be a JSON object");
  // Checked here as the server would, before protobuf's encoder recurses through a task nested too deep for its stack.
  const problem = taskProblem(task as JsonValue);
  if (problem) throw new UsageError(problem);
  return task as Record<string, unknown>;
}

/**
 * The file's text, read to its end but never past MAX_TASK_FILE_BYTES: a pipe (`<(jq …)`) or a
 * device reports no size to check first, and `/dev/zero` never ends. Bytes that are not UTF-8 are
 * refused, not read as U+FFFD; a byte order mark (editors on Windows write one) is dropped.
 */
function readTaskFile(file: string): string {
  const bytes = Buffer.allocUnsafe(MAX_TASK_FILE_BYTES + 1);
  let length = 0;
  try {
    const fd = openSync(file, "r");
    try {
      for (let n = -1; n !== 0 && length < bytes.length; length += n)
        n = readSync(fd, bytes, length, bytes.length - length, null);
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    throw new UsageError(`cannot read --task-file ${file}: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
  }
  if (length > MAX_TASK_FILE_BYTES)
    throw new UsageError(
      `--task-file ${file}: more than ${MAX_TASK_FILE_BYTES} bytes; a task file may hold at most that`,
    );
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, length));
  } catch {
    throw new UsageError(`--task-file ${file}: not UTF-8 text`);
  }
}

export function readBudget(pairs: readonly string[]): Record<string, number | bigint> {
  const budget: Record<string, number | bigint> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    const [key, value] = at < 0 ? [pair, undefined] : [pair.slice(0, at), pair.slice(at + 1)];
    const field = BUDGET_KEYS[key];
    if (!field || value === undefined || !/^\d+$/.test(value)) {
      throw new UsageError(
        `--budget ${pair}: expected key=integer with key one of ${Object.keys(BUDGET_KEYS).join(", ")}`,
      );
    }
    // The contract's own limits are the server's to state; these are what its fields can carry at all.
    const wide = field === "maxTokens" || field === "maxCostMicros";
    const most = wide ? 2n ** 64n - 1n : 2n ** 32n - 1n;
    if (BigInt(value) > most) throw new UsageError(`--budget ${key}=${value}: at most ${most}`);
    budget[field] = wide ? BigInt(value) : Number(value);
  }
  return budget;
}

/** --state by its name (any case); unset, every state. */
export function readState(name: string | undefined): SessionState {
  if (!name) return SessionState.UNSPECIFIED;
  // By name only: SessionState["3"] is the enum's reverse mapping, a name, not a state.
  const state: unknown = SessionState[name.toUpperCase() as keyof typeof SessionState];
  if (typeof state === "number" && state !== SessionState.UNSPECIFIED) return state;
  throw new UsageError(
    `--state must be one of ${Object.keys(SessionState)
      .filter((k) => Number.isNaN(Number(k)) && k !== "UNSPECIFIED")
      .join(", ")}`,
  );
}
