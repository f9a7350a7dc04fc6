// The last log lines per session, in memory, for the dashboard's session panel. Lines arrive
// already redacted (the logger's allow-list runs before `write`). Both bounds are hard: lines
// per session, and sessions kept (least recently written dropped first), so a busy replica's
// memory does not grow with the number of sessions it has ever run.
import { LRUCache } from "lru-cache";

export interface LogTailOptions {
  readonly linesPerSession?: number;
  readonly maxSessions?: number;
}

export type LogLine = Readonly<Record<string, unknown>>;

export class LogTail {
  readonly #linesPerSession: number;
  /** Recency is by write: reads peek, so the dashboard looking at a session does not keep it. */
  readonly #bySession: LRUCache<string, LogLine[]>;

  constructor(options: LogTailOptions = {}) {
    this.#linesPerSession = options.linesPerSession ?? 50;
    this.#bySession = new LRUCache({ max: options.maxSessions ?? 1000 });
  }

  /** Takes one JSON log line; lines without a session_id or trace_id are not kept. */
  write(line: string): void {
    // Most lines carry neither key; skip parsing them.
    if (!line.includes('"session_id"') && !line.includes('"trace_id"')) return;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      return;
    }
    if (!record || typeof record !== "object" || Array.isArray(record)) return;
    const fields = record as Record<string, unknown>;
    const key = nonEmpty(fields.session_id) ?? nonEmpty(fields.trace_id);
    if (!key) return;
    const lines = this.#bySession.get(key) ?? [];
    if (lines.length === 0) this.#bySession.set(key, lines);
    lines.push(fields);
    if (lines.length > this.#linesPerSession) lines.splice(0, lines.length - this.#linesPerSession);
  }

  /** The kept lines under any of these keys (a session's id and its trace id), oldest first. */
  linesFor(...keys: readonly string[]): LogLine[] {
    const out = [...new Set(keys)].flatMap((k) => this.#bySession.peek(k) ?? []);
    return out.sort((a, b) => String(a.time ?? "").localeCompare(String(b.time ?? "")));
  }

  get sessionCount(): number {
    return this.#bySession.size;
  }
}

function nonEmpty(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}
