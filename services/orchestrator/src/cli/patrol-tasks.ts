// The patrol's golden set (test/golden/tasks.jsonl): one task per line with its expectation, read
// strictly — a line that does not say what it expects is a usage error naming the line, never a
// task silently skipped.
import { jsonParseReason } from "@loopguard/tool-sdk";
import { depthOf } from "../api/start-request.js";
import type { JsonValue } from "../store/session-store.js";
import { UsageError } from "./identity.js";

export type Approval = "none" | "approve" | "deny";

export interface GoldenTask {
  readonly id: string;
  readonly goal: string;
  readonly task: Record<string, unknown>;
  readonly policy: string;
  readonly budget: Record<string, number>;
  readonly scopes?: readonly string[];
  readonly idempotencyKey?: string;
  /** Tasks of one lane run one after another (e.g. one customer's: their holds count in each other's totals). */
  readonly lane: string;
  readonly expect:
    | {
        readonly outcome: "succeeded" | "partial" | "not_done";
        readonly stopReason: string;
        readonly approval: Approval;
      }
    | { readonly error: { readonly code: string; readonly field: string } };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A task nested deeper than this is not sent at all: encoding it would overflow the stack. The server accepts MAX_TASK_DEPTH. */
const MAX_SENT_DEPTH = 64;

const UINT32 = 2 ** 32 - 1;
/**
 * The budget keys a line may set: the request field each fills, and the largest figure it can carry
 * (uint32; uint64 fields as far as a JSON number is exact).
 */
export const BUDGET_KEYS: Readonly<Record<string, { readonly field: string; readonly most: number }>> = {
  max_steps: { field: "maxSteps", most: UINT32 },
  max_tool_calls: { field: "maxToolCalls", most: UINT32 },
  max_wall_clock_ms: { field: "maxWallClockMs", most: UINT32 },
  max_tokens: { field: "maxTokens", most: Number.MAX_SAFE_INTEGER },
  max_cost_micros: { field: "maxCostMicros", most: Number.MAX_SAFE_INTEGER },
};

/** A line's budget: known keys, each a whole number its field can carry (the server judges the limits). */
function budgetOf(budget: unknown, where: string): Record<string, number> {
  if (budget === undefined) return {};
  if (!isObject(budget)) throw new UsageError(`${where}: "budget" must be an object`);
  for (const [key, value] of Object.entries(budget)) {
    const most = BUDGET_KEYS[key]?.most;
    if (most === undefined)
      throw new UsageError(`${where}: budget key "${key}" is not one of ${Object.keys(BUDGET_KEYS).join(", ")}`);
    if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > most)
      throw new UsageError(`${where}: budget.${key} must be a whole number in 0..${most}`);
  }
  return budget as Record<string, number>;
}

function parseLine(line: string, where: string, live: boolean): GoldenTask {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (error) {
    // Not V8's message: it quotes the line, and a cut-off phone or id card in it escapes the masks.
    throw new UsageError(`${where}: not JSON (${jsonParseReason(error)})`);
  }
  if (!isObject(raw)) throw new UsageError(`${where}: expected a JSON object`);
  const { id, goal, task, policy, budget, scopes, idempotency_key: key, lane, expect } = raw;
  if (typeof id !== "string" || !/^[\w.-]{1,64}$/.test(id))
    throw new UsageError(`${where}: "id" must be 1..64 letters, digits, _ . -`);
  if (typeof goal !== "string") throw new UsageError(`${where} (${id}): "goal" must be a string`);
  if (task !== undefined && !isObject(task)) throw new UsageError(`${where} (${id}): "task" must be an object`);
  // What the server accepts is its to say (the golden set tests its refusals); what the client could not even encode is not.
  const depth = task === undefined ? 0 : depthOf(task as JsonValue);
  if (depth > MAX_SENT_DEPTH)
    throw new UsageError(
      `${where} (${id}): "task" nests ${depth} levels deep; the patrol sends at most ${MAX_SENT_DEPTH}`,
    );
  if (scopes !== undefined && !(Array.isArray(scopes) && scopes.every((s) => typeof s === "string")))
    throw new UsageError(`${where} (${id}): "scopes" must be a list of strings`);
  // A patrol without --live runs every task dry. A line that asks for a live run says something the
  // run will not do, and this file is read strictly: refused, naming the line, rather than run dry
  // against its word (a silent override would keep a line that moves money the day --live is given).
  if (!live && isObject(task) && task.dry_run === false)
    throw new UsageError(
      `${where} (${id}): "task.dry_run" is false, which moves money; without --live every task runs dry (drop it, or run with --live)`,
    );
  if (!isObject(expect)) throw new UsageError(`${where} (${id}): "expect" must be an object`);
  let expectation: GoldenTask["expect"];
  if (isObject(expect.error)) {
    const { code, field } = expect.error;
    if (typeof code !== "string" || typeof field !== "string")
      throw new UsageError(`${where} (${id}): expect.error needs "code" and "field"`);
    expectation = { error: { code, field } };
  } else {
    const { outcome, stop_reason: stopReason, approval } = expect;
    if (outcome !== "succeeded" && outcome !== "partial" && outcome !== "not_done")
      throw new UsageError(`${where} (${id}): expect.outcome must be succeeded, partial or not_done`);
    if (typeof stopReason !== "string") throw new UsageError(`${where} (${id}): expect.stop_reason must be a string`);
    if (approval !== "none" && approval !== "approve" && approval !== "deny")
      throw new UsageError(`${where} (${id}): expect.approval must be none, approve or deny`);
    expectation = { outcome, stopReason, approval };
  }
  return {
    id,
    goal,
    task: (task as Record<string, unknown> | undefined) ?? {},
    policy: typeof policy === "string" ? policy : "scripted",
    budget: budgetOf(budget, `${where} (${id})`),
    ...(Array.isArray(scopes) ? { scopes: scopes as string[] } : {}),
    ...(typeof key === "string" ? { idempotencyKey: key } : {}),
    lane: typeof lane === "string" ? lane : id,
    expect: expectation,
  };
}

/**
 * Every task of the file's text; a UsageError naming the first line that is wrong, or a repeated id.
 * Without `live` (the patrol's --live), a line whose task sets "dry_run": false is wrong.
 */
export function parseGoldenSet(text: string, file: string, live = false): GoldenTask[] {
  const tasks: GoldenTask[] = [];
  const seen = new Set<string>();
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const task = parseLine(line, `${file}:${i + 1}`, live);
    if (seen.has(task.id)) throw new UsageError(`${file}:${i + 1}: id "${task.id}" is used twice`);
    seen.add(task.id);
    tasks.push(task);
  });
  if (tasks.length === 0) throw new UsageError(`${file} holds no tasks`);
  return tasks;
}

/**
 * The task a session is started with. Without --live it runs dry: "dry_run" is true, whatever the
 * line says (parseGoldenSet refuses false; a task from elsewhere saying false still runs dry), but a
 * value that is not a boolean is kept, for StartSession to refuse (the golden set tests that).
 */
export function sessionTask(t: GoldenTask, live: boolean): Record<string, unknown> {
  if (live) return t.task;
  const given = t.task.dry_run;
  return { ...t.task, dry_run: given === undefined || given === null || typeof given === "boolean" ? true : given };
}

/** What a task expects, as the report shows it. */
export function expectedText(t: GoldenTask): string {
  return "error" in t.expect
    ? `${t.expect.error.code} on ${t.expect.error.field}`
    : `${t.expect.outcome} ${t.expect.stopReason}${t.expect.approval === "none" ? "" : ` (${t.expect.approval})`}`;
}
