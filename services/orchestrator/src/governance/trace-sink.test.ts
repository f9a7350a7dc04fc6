import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openSessionStore } from "../store/open-store.js";
import type { SessionStore } from "../store/session-store.js";
import { listTraceFiles, type TraceRetention } from "./trace-files.js";
import { type StepTrace, TraceSink, type TraceSinkOptions } from "./trace-sink.js";

const dirs: string[] = [];
const stores: SessionStore[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function sink(
  traceDir: (root: string) => string,
  retention?: TraceRetention,
  options: Omit<TraceSinkOptions, "retention"> = {},
): Promise<{ root: string; traces: TraceSink }> {
  const root = mkdtempSync(join(tmpdir(), "trace-sink-"));
  dirs.push(root);
  const store = await openSessionStore(`sqlite:${join(root, "o.db")}`);
  stores.push(store);
  return { root, traces: new TraceSink(store, traceDir(root), { retention, ...options }) };
}

/** The UTC day in the name of the file written now. */
function today(): string {
  return new Date().toISOString().slice(0, 10);
}

function record(step: number, at: string, phone = "13912345678", session = "ses_1"): StepTrace {
  return {
    run_id: "r",
    session_id: session,
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
  it("appends redacted records to the rolling JSONL file, written out by close", async () => {
    const { root, traces } = await sink((r) => join(r, "traces"));
    const steps = [record(1, "2026-11-30T23:59:59.000Z"), record(2, "2026-12-01T00:00:01.000Z")].map((r) =>
      traces.step(r),
    );
    for (const step of steps) await traces.append(step);
    await traces.close();
    expect(readdirSync(join(root, "traces"))).toEqual([`steps.${today()}.1.jsonl`]);
    const text = readFileSync(join(root, "traces", `steps.${today()}.1.jsonl`), "utf8");
    expect(text).toBe(`${steps[0]!.json}\n${steps[1]!.json}\n`);
    expect(text).not.toContain("13912345678");
    expect(statSync(join(root, "traces", `steps.${today()}.1.jsonl`)).mode & 0o777).toBe(0o600);
  });

  it("after a crash cut the day's last line short, appends the next record as a line of its own", async () => {
    const { root, traces } = await sink((r) => join(r, "traces"));
    const name = join(root, "traces", `steps.${today()}.1.jsonl`);
    mkdirSync(join(root, "traces"), { recursive: true });
    writeFileSync(name, '{"step":1}\n{"step":2,"sess');
    const step = traces.step(record(3, new Date().toISOString()));
    await traces.append(step);
    await traces.close();
    expect(readFileSync(name, "utf8").split("\n")).toEqual(['{"step":1}', '{"step":2,"sess', step.json, ""]);
  });

  it("a file that cannot be opened fails neither the append nor close", async () => {
    const { root, traces } = await sink((r) => join(r, "traces"));
    const name = `steps.${today()}.1.jsonl`;
    mkdirSync(join(root, "traces", name), { recursive: true });
    await traces.append(traces.step(record(1, "2026-12-01T00:00:00.000Z")));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await traces.append(traces.step(record(2, "2026-12-01T00:00:01.000Z")));
    await traces.close();
    expect(statSync(join(root, "traces", name)).isDirectory()).toBe(true);
  });

  /** A sink whose file failures and recoveries are recorded in `told`, tried again 1 s after a failure. */
  async function watched(retention?: TraceRetention) {
    const told: string[] = [];
    const events = {
      failed: (error: Error, first: boolean) => told.push(first ? `failed: ${error.message}` : "failed again"),
      recovered: () => told.push("recovered"),
    };
    const { root, traces } = await sink((r) => join(r, "traces"), retention, { retryMs: 1000, events });
    const until = async (what: string) => {
      for (let wait = 0; wait < 200 && !told.includes(what); wait += 1) await new Promise((r) => setTimeout(r, 10));
    };
    return { dir: join(root, "traces"), traces, told, until };
  }

  it("reports a file that cannot be opened once, and after a pause writes the steps to the next file", async () => {
    const { dir, traces, told, until } = await watched();
    mkdirSync(join(dir, `steps.${today()}.1.jsonl`), { recursive: true });
    const steps = [1, 2, 3].map((i) => traces.step(record(i, new Date().toISOString())));
    await traces.append(steps[0]!);
    for (let wait = 0; wait < 200 && told.length === 0; wait += 1) await new Promise((r) => setTimeout(r, 10));
    // Within the pause: the step stays in the store only, and the failure is not told again.
    await traces.append(steps[1]!);
    await new Promise((r) => setTimeout(r, 1100));
    await traces.append(steps[2]!);
    await until("recovered");
    await traces.close();
    expect(told).toEqual([expect.stringMatching(/^failed: .*not a file/), "recovered"]);
    expect(readFileSync(join(dir, `steps.${today()}.2.jsonl`), "utf8")).toBe(`${steps[2]!.json}\n`);
  });

  it("after a failure in the middle of the day's files, starts a new file rather than go on after a line the failure may have cut short", async () => {
    const first = (await sink((r) => join(r, "unused"))).traces.step(record(1, new Date().toISOString()));
    // The second write fills the file, and the file it rolls to is in the way.
    const { dir, traces, told, until } = await watched({
      fileBytes: first.json!.length + 2,
      totalBytes: 1 << 20,
      maxAgeMs: 3600_000,
    });
    const written = (n: number) => join(dir, `steps.${today()}.${n}.jsonl`);
    await traces.append(first);
    for (let wait = 0; wait < 200 && !(existsSync(written(1)) && statSync(written(1)).size > 0); wait += 1)
      await new Promise((r) => setTimeout(r, 10));
    mkdirSync(written(2));
    await traces.append(traces.step(record(2, new Date().toISOString())));
    for (let wait = 0; wait < 200 && told.length === 0; wait += 1) await new Promise((r) => setTimeout(r, 10));
    expect(told).toEqual([expect.stringMatching(/^failed: .*not a file/)]);
    await new Promise((r) => setTimeout(r, 1100));
    const third = traces.step(record(3, new Date().toISOString()));
    await traces.append(third);
    await until("recovered");
    await traces.close();
    expect(told.at(-1)).toBe("recovered");
    expect(readFileSync(written(3), "utf8")).toBe(`${third.json}\n`);
  });

  it("keeps the files at or under the cap: aged and oldest files go first, the newest steps stay readable", async () => {
    const retention: TraceRetention = { fileBytes: 4096, totalBytes: 16_384, maxAgeMs: 24 * 3600_000 };
    const { root, traces } = await sink((r) => join(r, "traces"), retention);
    const dir = join(root, "traces");
    // Left by earlier runs: one past the age limit, one recent in the one-file-a-day naming of earlier releases.
    mkdirSync(dir, { recursive: true });
    const aged = join(dir, "steps-2026-11-20.jsonl");
    const earlier = join(dir, "steps-2026-12-01.jsonl");
    writeFileSync(aged, "{}\n".repeat(100));
    writeFileSync(earlier, "{}\n".repeat(1000));
    utimesSync(aged, new Date(Date.now() - 10 * 24 * 3600_000), new Date(Date.now() - 10 * 24 * 3600_000));
    utimesSync(earlier, new Date(Date.now() - 3600_000), new Date(Date.now() - 3600_000));

    const used = async () => (await listTraceFiles(dir)).reduce((sum, f) => sum + f.bytes, 0);
    const steps = 300;
    let written = 0;
    for (let i = 1; i <= steps; i += 1) {
      const step = traces.step(record(i, new Date().toISOString(), "13912345678", `ses_${i % 3}`));
      written += step.json!.length + 1;
      await traces.append(step);
      // One write per step, so the files roll as they would under steady load.
      await new Promise((resolve) => setImmediate(resolve));
      if (i === 1) {
        // Opening the first file sweeps: the aged file goes at once, the recent one while the cap still has room.
        for (let wait = 0; wait < 500 && existsSync(aged); wait += 1) await new Promise((r) => setTimeout(r, 10));
        expect([existsSync(aged), existsSync(earlier)]).toEqual([false, true]);
      }
      if (i % 50 === 0) {
        // A write may take the directory past the cap until the sweep it starts is done.
        for (let wait = 0; wait < 500 && (await used()) > retention.totalBytes; wait += 1)
          await new Promise((r) => setTimeout(r, 10));
        expect(await used(), `after step ${i}`).toBeLessThanOrEqual(retention.totalBytes);
      }
    }
    await traces.close();

    const files = await listTraceFiles(dir);
    // Named in the order written, as a reader sorting by name expects: after the sweep deleted the day's first
    // files, a new file does not take one of their numbers. Each file took at most fileBytes and one more line.
    const numberOf = (path: string) => Number(/\.(\d+)\.jsonl$/.exec(path)![1]);
    expect(files.map((f) => f.path)).toEqual(files.map((f) => f.path).sort((a, b) => numberOf(a) - numberOf(b)));
    expect(numberOf(files.at(-1)!.path)).toBeGreaterThanOrEqual(Math.floor(written / (retention.fileBytes + 400)));
    const total = files.reduce((sum, f) => sum + f.bytes, 0);
    expect(written).toBeGreaterThan(4 * retention.totalBytes);
    expect(total).toBeLessThanOrEqual(retention.totalBytes);
    // It keeps what the cap allows, not only the open file.
    expect(total).toBeGreaterThan(retention.totalBytes - 2 * retention.fileBytes);
    expect(files.map((f) => f.path)).not.toContain(aged);
    expect(files.map((f) => f.path)).not.toContain(earlier);
    // Rolled by size: every file but the one written last reached it.
    for (const f of files.slice(0, -1)) expect(f.bytes).toBeGreaterThanOrEqual(retention.fileBytes);
    // Read oldest file first, as a reader does: a run of steps with no gap, ending at the newest one.
    const kept = files.flatMap((f) =>
      readFileSync(f.path, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((line) => (JSON.parse(line) as { step: number }).step),
    );
    expect(kept.at(-1)).toBe(steps);
    expect(kept[0]).toBeGreaterThan(1);
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => kept[0]! + i));
    expect(readFileSync(files.at(-1)!.path, "utf8")).not.toContain("13912345678");
  });
});
