// One JSONL record per step, redacted before it is written: to a file per session under the
// data folder, and to the store (so GetTrace works from any replica).
import { appendFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { redact } from "./redact.js";
import type { JsonObject, SessionStore } from "./session-store.js";

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

  constructor(
    private readonly store: SessionStore,
    private readonly dir: string | undefined,
  ) {
    this.#ready = dir ? mkdir(dir, { recursive: true }) : Promise.resolve();
  }

  async write(record: StepTrace): Promise<void> {
    const clean = redact(record as unknown as JsonObject);
    await this.store.appendStep(record.session_id, { step: record.step, at: Date.parse(record.at), payload: clean });
    if (this.dir) {
      await this.#ready;
      await appendFile(join(this.dir, `${record.session_id}.jsonl`), `${JSON.stringify(clean)}\n`);
    }
  }

  async read(sessionId: string): Promise<string[]> {
    return (await this.store.steps(sessionId)).map((s) => JSON.stringify(s.payload));
  }
}
