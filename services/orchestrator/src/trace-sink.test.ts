import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openSessionStore } from "./open-store.js";
import type { SessionStore } from "./session-store.js";
import { TraceSink, type StepTrace } from "./trace-sink.js";

const dirs: string[] = [];
const stores: SessionStore[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function sink(traceDir: (root: string) => string): Promise<{ root: string; traces: TraceSink }> {
  const root = mkdtempSync(join(tmpdir(), "trace-sink-"));
  dirs.push(root);
  const store = await openSessionStore(`sqlite:${join(root, "o.db")}`);
  stores.push(store);
  return { root, traces: new TraceSink(store, traceDir(root)) };
}

function record(step: number, at: string, phone = "13912345678"): StepTrace {
  return {
    run_id: "r",
    session_id: "ses_1",
    step,
    state_before: "RUNNING",
    state_after: "RUNNING",
    decision: { note: `call ${phone}` },
    result: null,
    budget_before: {},
    fingerprint: null,
    prompt_hash: null,
    tool_version: null,
    attempt: 1,
    trace_id: "t",
    traceparent: "00-t-s-01",
    duration_ms: 1,
    at,
  };
}

describe("TraceSink", () => {
  it("appends redacted records to one JSONL file per UTC day, written out by close", async () => {
    const { root, traces } = await sink((r) => join(r, "traces"));
    const steps = [record(1, "2026-11-30T23:59:59.000Z"), record(2, "2026-12-01T00:00:01.000Z"), record(3, "2026-12-01T00:00:02.000Z")].map((r) => traces.step(r));
    for (const step of steps) await traces.append(step);
    await traces.close();
    const day = (d: string) => readFileSync(join(root, "traces", `steps-${d}.jsonl`), "utf8");
    expect(day("2026-11-30")).toBe(`${steps[0]!.json}\n`);
    expect(day("2026-12-01")).toBe(`${steps[1]!.json}\n${steps[2]!.json}\n`);
    expect(day("2026-12-01")).not.toContain("13912345678");
  });

  it("a day file that cannot be opened fails neither the append nor close", async () => {
    const { root, traces } = await sink((r) => join(r, "traces"));
    mkdirSync(join(root, "traces", "steps-2026-12-01.jsonl"), { recursive: true });
    await traces.append(traces.step(record(1, "2026-12-01T00:00:00.000Z")));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await traces.append(traces.step(record(2, "2026-12-01T00:00:01.000Z")));
    await traces.close();
    expect(statSync(join(root, "traces", "steps-2026-12-01.jsonl")).isDirectory()).toBe(true);
  });
});
