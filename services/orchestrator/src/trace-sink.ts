// One JSONL record per step, redacted before it is written. The store copy (what GetTrace reads,
// from any replica) is written in the same transaction as the transition that completes the
// step; the file copy is appended once that transition committed, to one file per UTC day
// (<data>/traces/steps-YYYY-MM-DD.jsonl) that every session of this process shares, the shape
// log shippers tail. The lines of one turn of the event loop go to the file as one write, through
// pino's asynchronous destination (sonic-boom), which joins those that arrive while a write is in
// flight. Each record carries its session_id and trace_id.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PRIVATE_DIR_MODE } from "@loopguard/sql-store";
import { pino } from "pino";
import { redact } from "./redact.js";
import type { JsonObject, SessionStore, StepRecord } from "./session-store.js";

type Destination = ReturnType<typeof pino.destination>;

/** The open day file; `failed` once it reported an error, after which it takes no more lines. */
interface DayFile {
  readonly day: string;
  readonly destination: Destination;
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
}

export class TraceSink {
  readonly #ready: Promise<unknown>;
  /** The open day file, rotated at midnight UTC. */
  #file: DayFile | undefined;

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
      if (this.#file) void closeDayFile(this.#file);
      const destination = pino.destination({ dest: join(this.dir, `steps-${day}.jsonl`), append: true, sync: false });
      const file: DayFile = { day, destination, failed: false, lines: [] };
      // The store holds the authoritative copy; a failing file copy must not fail the session.
      destination.on("error", () => (file.failed = true));
      this.#file = file;
    }
    const file = this.#file;
    if (!file.failed && file.lines.push(`${step.json ?? JSON.stringify(step.payload)}\n`) === 1) setImmediate(() => writeLines(file));
  }

  /** Flushes and closes the file; the next append opens it again. */
  async close(): Promise<void> {
    const file = this.#file;
    this.#file = undefined;
    if (file) await closeDayFile(file);
  }

  async read(sessionId: string): Promise<string[]> {
    return (await this.store.steps(sessionId)).map((s) => JSON.stringify(s.payload));
  }
}

function writeLines(file: DayFile): void {
  if (file.lines.length === 0 || file.failed) return;
  file.destination.write(file.lines.join(""));
  file.lines = [];
}

/** Writes what is buffered and closes; a file that failed is only let go (it may never have opened). */
function closeDayFile(file: DayFile): Promise<void> {
  writeLines(file);
  if (file.failed) return Promise.resolve();
  return new Promise((resolve) => {
    file.destination.once("close", resolve);
    file.destination.once("error", () => resolve());
    file.destination.end();
  });
}
