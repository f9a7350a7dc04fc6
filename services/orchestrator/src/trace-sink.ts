// One JSONL record per step, redacted before it is written. The store copy (what GetTrace reads,
// from any replica) is written in the same transaction as the transition that completes the
// step; the file copy (<data>/traces/<session>.jsonl) is appended once that transition committed,
// through a write stream kept open while the session runs.
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { redact } from "./redact.js";
import type { JsonObject, SessionStore, StepRecord } from "./session-store.js";

export interface StepTrace {
  readonly run_id: string;
  readonly session_id: string;
  readonly step: number;
  readonly state_before: string;
  readonly state_after: string;
  readonly decision: JsonObject;
  readonly result: JsonObject | null;
  readonly budget_before: JsonObject;
  readonly fingerprint: string | null;
  readonly prompt_hash: string | null;
  readonly tool_version: string | null;
  readonly attempt: number;
  readonly trace_id: string;
  readonly traceparent: string;
  readonly duration_ms: number;
  readonly at: string;
}

/** Open trace files at most; the least recently opened is closed past it. */
const MAX_OPEN_FILES = 256;

export class TraceSink {
  readonly #ready: Promise<unknown>;
  readonly #files = new Map<string, WriteStream>();

  constructor(
    private readonly store: SessionStore,
    private readonly dir: string | undefined,
  ) {
    this.#ready = dir ? mkdir(dir, { recursive: true }) : Promise.resolve();
  }

  /** The redacted step record, ready to go into the transition that completes the step. */
  step(record: StepTrace): StepRecord {
    return { step: record.step, at: Date.parse(record.at), payload: redact(record as unknown as JsonObject) };
  }

  /** Appends a committed step to the session's JSONL file. */
  async append(sessionId: string, step: StepRecord): Promise<void> {
    if (!this.dir) return;
    await this.#ready;
    let file = this.#files.get(sessionId);
    if (!file) {
      file = createWriteStream(join(this.dir, `${sessionId}.jsonl`), { flags: "a" });
      // The store holds the authoritative copy; a failing file copy must not fail the session.
      file.on("error", () => undefined);
      this.#files.set(sessionId, file);
      if (this.#files.size > MAX_OPEN_FILES) await this.close(this.#files.keys().next().value!);
    }
    file.write(`${JSON.stringify(step.payload)}\n`);
  }

  /** Closes the session's file (when the session ends or this replica lets it go). */
  async close(sessionId: string): Promise<void> {
    const file = this.#files.get(sessionId);
    this.#files.delete(sessionId);
    if (file) await new Promise<void>((resolve) => file.end(resolve));
  }

  async read(sessionId: string): Promise<string[]> {
    return (await this.store.steps(sessionId)).map((s) => JSON.stringify(s.payload));
  }
}
