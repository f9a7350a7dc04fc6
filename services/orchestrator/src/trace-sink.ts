// One JSONL record per step, redacted before it is written. The store copy (what GetTrace reads,
// from any replica) is written in the same transaction as the transition that completes the
// step; the file copy is appended once that transition committed, to one file per UTC day
// (<data>/traces/steps-YYYY-MM-DD.jsonl) that every session of this process shares: one open
// stream whose writes coalesce, instead of a file opened and closed per session, and the shape
// log shippers tail. Each record carries its session_id and trace_id.
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PRIVATE_DIR_MODE } from "@loopguard/sql-store";
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

export class TraceSink {
  readonly #ready: Promise<unknown>;
  /** The open day file, rotated at midnight UTC. */
  #file: { readonly day: string; readonly stream: WriteStream } | undefined;
  /**
   * Lines appended in this turn of the event loop, written to the stream as one chunk at its end:
   * a stream write per line cost more than the line itself (a Buffer and a writev entry each).
   */
  #lines: string[] = [];

  constructor(
    private readonly store: SessionStore,
    private readonly dir: string | undefined,
  ) {
    this.#ready = dir ? mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE }) : Promise.resolve();
  }

  /**
   * The redacted step record, ready to go into the transition that completes the step; serialised
   * once, for the store and the file alike.
   */
  step(record: StepTrace): StepRecord {
    const payload = redact(record as unknown as JsonObject);
    return { step: record.step, at: Date.parse(record.at), payload, json: JSON.stringify(payload) };
  }

  /** Appends a committed step to the day's JSONL file. */
  async append(step: StepRecord): Promise<void> {
    if (!this.dir) return;
    await this.#ready;
    const day = new Date(step.at).toISOString().slice(0, 10);
    if (this.#file?.day !== day) {
      this.#flush();
      this.#file?.stream.end();
      const stream = createWriteStream(join(this.dir, `steps-${day}.jsonl`), { flags: "a" });
      // The store holds the authoritative copy; a failing file copy must not fail the session.
      stream.on("error", () => undefined);
      this.#file = { day, stream };
    }
    if (this.#lines.push(`${step.json ?? JSON.stringify(step.payload)}\n`) === 1) setImmediate(() => this.#flush());
  }

  #flush(): void {
    if (this.#lines.length === 0) return;
    this.#file?.stream.write(this.#lines.join(""));
    this.#lines = [];
  }

  /** Flushes and closes the file; the next append opens it again. */
  async close(): Promise<void> {
    this.#flush();
    const file = this.#file;
    this.#file = undefined;
    if (file) await new Promise<void>((resolve) => file.stream.end(resolve));
  }

  async read(sessionId: string): Promise<string[]> {
    return (await this.store.steps(sessionId)).map((s) => JSON.stringify(s.payload));
  }
}
