// One JSONL record per step, redacted before it is written, the task's own numbers masked however
// the model or a tool wrote them (servedView). The store copy (what GetTrace reads,
// from any replica) is written in the same transaction as the transition that completes the
// step; once that transition committed, the record goes to the rolling JSONL files that every
// session of this process shares (trace-files.ts: rolled daily and by size, swept by age and total
// size), the shape log shippers tail, and to the OTLP logs pipeline (step-logs.ts). The lines of
// one turn of the event loop go to the file as one write, through the rolling file's stream,
// which joins those that arrive while a write is in flight (a Writable's `_writev`). Each record
// carries its session_id and trace_id. A file that fails (a full disk, a path that is not a file) is
// reported and let go; after a pause the next step opens a new file, never appending to one whose
// last line a failed write may have cut short.
import { mkdir } from "node:fs/promises";
import { finished } from "node:stream/promises";
import { PRIVATE_DIR_MODE } from "@loopguard/sql-store";
import { type ServedView, servedView } from "../guard/personal-data-served.js";
import { redact } from "../guard/redact.js";
import type { JsonObject, SessionStore, StepRecord } from "../store/session-store.js";
import { exportStep } from "./step-logs.js";
import { DEFAULT_TRACE_RETENTION, openTraceFile, type TraceFileWriter, type TraceRetention } from "./trace-files.js";

/** The open file; `failed` once it reported an error, after which it takes no more lines. */
interface OpenFile extends TraceFileWriter {
  failed: boolean;
  /** Lines appended in this turn, written at its end (docs/performance.md). */
  lines: string[];
}

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
  /** A decision step's prompt: tokens before and after compression, the window, and its 80% alarm. */
  readonly context?: JsonObject;
}

/** Told when the file fails and when steps reach a file again (the operator's log and metrics). */
export interface TraceFileEvents {
  /** Each failure; `first` for the first since steps last reached a file. */
  failed(error: Error, first: boolean): void;
  /** A write went through after a failure. */
  recovered(): void;
}

export interface TraceSinkOptions {
  readonly retention?: TraceRetention;
  /** How long after a failure the next step opens a new file (default 10 s). */
  readonly retryMs?: number;
  readonly events?: TraceFileEvents;
}

export class TraceSink {
  /** The rolling file, opened by the first append after construction, close, or a failure's pause. */
  #file: Promise<OpenFile | undefined> | undefined;
  /** Failed since steps last reached a file: the next file is a new one, and its first write is told. */
  #failing = false;
  #retry: NodeJS.Timeout | undefined;
  /** Files opened so far: a failure's pause lets go of its own file only. */
  #opened = 0;
  readonly #retention: TraceRetention;
  readonly #retryMs: number;
  readonly #events: TraceFileEvents | undefined;

  constructor(
    private readonly store: SessionStore,
    private readonly dir: string | undefined,
    { retention = DEFAULT_TRACE_RETENTION, retryMs = 10_000, events }: TraceSinkOptions = {},
  ) {
    this.#retention = retention;
    this.#retryMs = retryMs;
    this.#events = events;
  }

  /**
   * The redacted step record of a session on `task`, ready to go into the transition that completes
   * the step; serialised once, for the store and the file alike.
   */
  step(record: StepTrace, task?: JsonObject): StepRecord {
    const redacted = redact(record as unknown as JsonObject);
    const payload = task ? servedView(task).storedValue(redacted) : redacted;
    return { step: record.step, at: Date.parse(record.at), payload, json: JSON.stringify(payload) };
  }

  /** Sends a committed step to the OTLP logs pipeline and appends it to the JSONL file. */
  async append(step: StepRecord): Promise<void> {
    exportStep(step);
    if (!this.dir) return;
    this.#file ??= this.#open(this.dir);
    const file = await this.#file;
    if (file && !file.failed && file.lines.push(`${step.json ?? JSON.stringify(step.payload)}\n`) === 1)
      setImmediate(() => this.#writeLines(file));
  }

  /** Flushes and closes the file; the next append opens it again. */
  async close(): Promise<void> {
    clearTimeout(this.#retry);
    const opening = this.#file;
    this.#file = undefined;
    const file = await opening;
    if (file) await closeFile(file);
  }

  /**
   * The session's step records as JSON, each as `served` shows it, masked again: a record stored
   * before a masking rule existed (a shape of phone number found later) is served as today's rules
   * would have stored it.
   */
  async read(sessionId: string, served: ServedView): Promise<string[]> {
    return (await this.store.steps(sessionId)).map((s) => JSON.stringify(served.storedValue(redact(s.payload))));
  }

  /** The store holds the authoritative copy; a file copy that cannot be opened or written must not fail the session. */
  async #open(dir: string): Promise<OpenFile | undefined> {
    const opened = ++this.#opened;
    try {
      await mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
      const writer = openTraceFile(dir, this.#retention, { fresh: this.#failing });
      const file: OpenFile = { destination: writer.destination, swept: writer.swept, failed: false, lines: [] };
      file.destination.on("error", (error: Error) => {
        if (file.failed) return;
        file.failed = true;
        this.#failed(error, opened);
      });
      return file;
    } catch (error) {
      this.#failed(error as Error, opened);
      return undefined;
    }
  }

  /** Reports the failure; after the pause, the next append opens a new file (unless closed or reopened meanwhile). */
  #failed(error: Error, opened: number): void {
    this.#events?.failed(error, !this.#failing);
    this.#failing = true;
    clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      if (this.#opened === opened) this.#file = undefined;
    }, this.#retryMs).unref();
  }

  #writeLines(file: OpenFile): void {
    if (file.lines.length === 0 || file.failed) return;
    file.destination.write(file.lines.join(""), (error) => {
      if (error || !this.#failing) return;
      this.#failing = false;
      this.#events?.recovered();
    });
    file.lines = [];
  }
}

/** Writes what is buffered, closes, and lets the last sweep finish; a file that failed is only let go (it may never have opened). */
async function closeFile(file: OpenFile): Promise<void> {
  if (!file.failed && file.lines.length > 0) file.destination.write(file.lines.join(""));
  if (!file.failed) await finished(file.destination.end()).catch(() => undefined);
  await file.swept();
}
