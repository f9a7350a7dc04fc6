import { describe, expect, it } from "vitest";
import { parseGoldenSet, sessionTask } from "./patrol-tasks.js";

const line = (task: Record<string, unknown>, id = "refund-1") =>
  JSON.stringify({
    id,
    goal: "Refund 100 cents of order ord_DEMO00000001",
    task: { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 100, ...task },
    expect: { outcome: "succeeded", stop_reason: "done", approval: "approve" },
  });

describe("the golden set's dry runs", () => {
  it("refuses a line that sets dry_run false without --live, naming the line", () => {
    const text = `${line({}, "ok")}\n${line({ dry_run: false })}\n`;
    expect(() => parseGoldenSet(text, "tasks.jsonl")).toThrow(
      /^tasks\.jsonl:2 \(refund-1\): "task\.dry_run" is false, which moves money; without --live every task runs dry/,
    );
    expect(() => parseGoldenSet(text, "tasks.jsonl", false)).toThrow(/tasks\.jsonl:2/);
    expect(parseGoldenSet(text, "tasks.jsonl", true).map((t) => t.task.dry_run)).toEqual([undefined, false]);
  });

  it("refuses, naming the line, a budget the request cannot carry, scopes that are not a list, a task too deep to send", () => {
    const withField = (field: Record<string, unknown>) => JSON.stringify({ ...JSON.parse(line({})), ...field });
    const refusal = (field: Record<string, unknown>) => {
      try {
        parseGoldenSet(`${line({}, "ok")}\n${withField(field)}\n`, "tasks.jsonl");
      } catch (error) {
        return (error as Error).message;
      }
      return "accepted";
    };
    expect(refusal({ budget: { max_tokens: 1.5 } })).toBe(
      `tasks.jsonl:2 (refund-1): budget.max_tokens must be a whole number in 0..${Number.MAX_SAFE_INTEGER}`,
    );
    expect(refusal({ budget: { max_steps: -1 } })).toBe(
      "tasks.jsonl:2 (refund-1): budget.max_steps must be a whole number in 0..4294967295",
    );
    expect(refusal({ budget: { max_steps: "abc" } })).toMatch(/budget\.max_steps must be a whole number/);
    expect(refusal({ budget: { steps: 3 } })).toMatch(
      /^tasks\.jsonl:2 \(refund-1\): budget key "steps" is not one of max_steps/,
    );
    expect(refusal({ budget: [] })).toBe('tasks.jsonl:2 (refund-1): "budget" must be an object');
    expect(refusal({ scopes: "kb:read" })).toBe('tasks.jsonl:2 (refund-1): "scopes" must be a list of strings');
    // Written as text: JSON.stringify itself would overflow the stack on it.
    const deep = `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`;
    const deepLine = line({}).replace(/"task":\{[^}]*\}/, `"task":${deep}`);
    let message = "accepted";
    try {
      parseGoldenSet(`${line({}, "ok")}\n${deepLine}\n`, "tasks.jsonl");
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toBe('tasks.jsonl:2 (refund-1): "task" nests 20000 levels deep; the patrol sends at most 64');
    // What the server refuses is its to say: a figure above its limits, a task it will not take.
    expect(refusal({ budget: { max_steps: 5000 }, task: { dry_run: "no" } })).toBe("accepted");
  });

  it("says why a line is not JSON without quoting it: a cut-off phone in the quote would escape the masks", () => {
    const text = '{"id":"r1","goal":"refund","task":{"phone":+8613800138000}}\n';
    expect(() => parseGoldenSet(text, "tasks.jsonl")).toThrow(/^tasks\.jsonl:1: not JSON \(Unexpected token '\+'\)$/);
  });

  it("runs every task dry without --live, whatever its line says, and as written with it", () => {
    const [unset, dry, asFalse, asText] = [{}, { dry_run: true }, { dry_run: false }, { dry_run: "no" }].map(
      (task, i) => parseGoldenSet(line(task, `t${i}`), "tasks.jsonl", true)[0]!,
    );
    expect(sessionTask(unset!, false).dry_run).toBe(true);
    expect(sessionTask(dry!, false).dry_run).toBe(true);
    expect(sessionTask(asFalse!, false).dry_run).toBe(true);
    // Not a boolean: kept for StartSession to refuse (the golden set's bad-dry-run-type), never run.
    expect(sessionTask(asText!, false).dry_run).toBe("no");
    expect(sessionTask(unset!, true)).not.toHaveProperty("dry_run");
    expect(sessionTask(asFalse!, true).dry_run).toBe(false);
  });

  it("reads the shipped golden set without --live", async () => {
    const { readFileSync } = await import("node:fs");
    const file = new URL("../../../../test/golden/tasks.jsonl", import.meta.url);
    expect(parseGoldenSet(readFileSync(file, "utf8"), "tasks.jsonl").length).toBeGreaterThan(0);
  });
});
