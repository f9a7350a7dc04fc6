import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { UsageError } from "./identity.js";
import { readBudget, readState, readTask } from "./run-options.js";

/** The UsageError `read` throws. */
function usage(read: () => unknown): string {
  try {
    read();
  } catch (error) {
    if (error instanceof UsageError) return error.message;
    throw error;
  }
  throw new Error("it was accepted");
}

describe("the command line's options", () => {
  it("reads --state by name only, in any case", () => {
    expect(readState(undefined)).toBe(SessionState.UNSPECIFIED);
    expect(readState("awaiting_approval")).toBe(SessionState.AWAITING_APPROVAL);
    for (const bad of ["3", "UNSPECIFIED", "nope"])
      expect(usage(() => readState(bad))).toMatch(/^--state must be one of /);
  });

  it("reads --budget as key=integer, refusing another '=' and a figure its field cannot carry", () => {
    expect(readBudget(["steps=5", "tokens=18446744073709551615"])).toEqual({
      maxSteps: 5,
      maxTokens: 18446744073709551615n,
    });
    expect(usage(() => readBudget(["steps=1=2"]))).toMatch(/^--budget steps=1=2: expected key=integer/);
    expect(usage(() => readBudget(["steps=99999999999999"]))).toBe("--budget steps=99999999999999: at most 4294967295");
    expect(usage(() => readBudget(["tokens=18446744073709551616"]))).toMatch(/at most 18446744073709551615$/);
    expect(usage(() => readBudget(["colour=1"]))).toMatch(/key one of steps, tool_calls/);
  });

  it("refuses a task the server would refuse, before encoding it: nested 1,000 levels deep it is named, not a stack overflow", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 1000; i += 1) deep = { a: deep };
    expect(usage(() => readTask({ task: JSON.stringify(deep) }))).toBe(
      "the task nests 1000 levels deep; at most 8 are accepted",
    );
    expect(usage(() => readTask({ task: JSON.stringify({ note: "x".repeat(17_000) }) }))).toMatch(
      /^the task is 170\d\d bytes of JSON; at most 16384 are accepted$/,
    );
  });

  it("reads --task-file, refusing an empty path, --task beside it, a file or device too large to read, and bytes that are not UTF-8", () => {
    const dir = mkdtempSync(join(tmpdir(), "run-options-"));
    try {
      const file = join(dir, "task.json");
      writeFileSync(file, JSON.stringify({ kind: "refund", order_id: "ord_1" }, null, 2));
      expect(readTask({ "task-file": file })).toEqual({ kind: "refund", order_id: "ord_1" });
      const marked = join(dir, "bom.json");
      writeFileSync(marked, `\uFEFF${JSON.stringify({ kind: "question" })}`);
      expect(readTask({ "task-file": marked })).toEqual({ kind: "question" });
      expect(usage(() => readTask({ "task-file": "" }))).toBe("--task-file: the path is empty");
      expect(usage(() => readTask({ "task-file": file, task: "{}" }))).toBe("give --task or --task-file, not both");
      const large = join(dir, "large.json");
      writeFileSync(large, " ".repeat(2 * 1024 * 1024));
      expect(usage(() => readTask({ "task-file": large }))).toBe(
        `--task-file ${large}: more than 1048576 bytes; a task file may hold at most that`,
      );
      // A device reports no size, and this one never ends.
      expect(usage(() => readTask({ "task-file": "/dev/zero" }))).toBe(
        "--task-file /dev/zero: more than 1048576 bytes; a task file may hold at most that",
      );
      const latin1 = join(dir, "latin1.json");
      writeFileSync(latin1, Buffer.from('{"kind":"question","note":"caf\xe9"}', "latin1"));
      expect(usage(() => readTask({ "task-file": latin1 }))).toBe(`--task-file ${latin1}: not UTF-8 text`);
      expect(usage(() => readTask({ "task-file": dir }))).toMatch(/: EISDIR$/);
      expect(usage(() => readTask({ "task-file": join(dir, "missing.json") }))).toMatch(/: ENOENT$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("says why a task is not JSON without quoting it", () => {
    const message = usage(() => readTask({ task: "x13912345678" }));
    expect(message).toMatch(/^the task is not valid JSON \(/);
    expect(message).not.toContain("1391234");
  });
});
