// Context governance: the session layer (tool results) is compressible, the task and control layers
// are not. Before every model call the prompt is counted as the model will receive it (model-tokens.ts);
// when it grows past a threshold, or would not leave room for the reply inside the model's window and
// the session's token budget, old observations become summaries that keep what the host and the
// model rely on — outcome, error code, refs, provenance and a sha256 of what was dropped — and lose
// their payload. The goal, the task, rejected answers' reasons and the latest observation of each
// tool (policies and preconditions read it) are never touched. At 80% of the window an alarm is raised.
import { createHash } from "node:crypto";
import type { TokenCounter } from "../policies/model-tokens.js";
import type { HistoryItem, PolicyInput, ResultEnvelope } from "../policies/policy.js";
import type { JsonObject } from "../store/session-store.js";

export interface ContextLimits {
  /** Prompt size (tokens) above which old observations are summarised. */
  readonly compressAboveTokens: number;
  /** The model's context window; an alarm is raised at 80% of it. */
  readonly windowTokens: number;
  /** Observations kept whole, newest first, unless the prompt would not fit otherwise. */
  readonly keepRecent: number;
  /** Tokens reserved for the reply (sent as the call's max tokens): the prompt must leave room for them. */
  readonly maxOutputTokens: number;
}

export const DEFAULT_CONTEXT_LIMITS: ContextLimits = Object.freeze({
  compressAboveTokens: 8000,
  windowTokens: 128_000,
  keepRecent: 4,
  maxOutputTokens: 1024,
});

/** The share of the window at which the alarm is raised. */
export const CONTEXT_ALARM_RATIO = 0.8;

export interface Governed {
  readonly history: HistoryItem[];
  /** Prompt tokens as given, and as sent after compression. */
  readonly tokensBefore: number;
  readonly tokens: number;
  /** Observations summarised by this call. */
  readonly compressed: number;
  /** False when even the hardest compression leaves no room for the reply: the model must not be called. */
  readonly fits: boolean;
  /** The most prompt tokens that would have fit (window or budget left, less the reply's reserve). */
  readonly ceiling: number;
  /** True when the prompt is at or above 80% of the window after compression. */
  readonly alarm: boolean;
}

/** What a summary keeps in place of the payload. */
interface Summary {
  readonly compressed: true;
  /** sha256 of the dropped payload's JSON ({ data, note, error message }): the full text is in the step's trace record. */
  readonly sha256: string;
  readonly bytes: number;
}

export function isSummary(data: unknown): data is Summary {
  return typeof data === "object" && data !== null && (data as { compressed?: unknown }).compressed === true;
}

/** An observation's envelope without its payload, keeping outcome, error code, refs and provenance. */
export function summarise(envelope: ResultEnvelope): ResultEnvelope {
  const dropped = JSON.stringify({
    data: envelope.data ?? null,
    note: envelope.note ?? null,
    error: envelope.error?.message ?? null,
  });
  const summary: Summary = {
    compressed: true,
    sha256: createHash("sha256").update(dropped).digest("hex"),
    bytes: Buffer.byteLength(dropped),
  };
  const { ok, refs, costMicros, servedFrom, observedAt, ageMs, error } = envelope;
  return {
    ok,
    data: summary as unknown as JsonObject,
    ...(error ? { error: { code: error.code, message: "", retryable: error.retryable, suggestedAction: "" } } : {}),
    refs,
    costMicros,
    servedFrom,
    observedAt,
    ...(ageMs === undefined ? {} : { ageMs }),
  };
}

/**
 * The history the model is shown for this prompt: as is when it is small, else with observations
 * summarised — first those older than `keepRecent`, then, if the reply still would not fit, every
 * one but the latest of each tool. `tokensLeft` is the session's token budget left.
 */
export function governContext(
  prompt: Pick<PolicyInput, "goal" | "task" | "tools" | "history">,
  limits: ContextLimits,
  counter: TokenCounter,
  tokensLeft: number,
): Governed {
  const ceiling = Math.min(limits.windowTokens, tokensLeft) - limits.maxOutputTokens;
  const count = (history: readonly HistoryItem[]) => counter.prompt({ ...prompt, history });
  const tokensBefore = count(prompt.history);
  let history = [...prompt.history];
  let tokens = tokensBefore;
  let compressed = 0;
  for (const keepRecent of [limits.keepRecent, 0]) {
    if (tokens <= ceiling && (tokens <= limits.compressAboveTokens || keepRecent === 0)) break;
    const pass = compress(history, keepRecent);
    if (pass.compressed === 0) continue;
    history = pass.history;
    compressed += pass.compressed;
    tokens = count(history);
  }
  return {
    history,
    tokensBefore,
    tokens,
    compressed,
    fits: tokens <= ceiling,
    ceiling,
    alarm: tokens >= CONTEXT_ALARM_RATIO * limits.windowTokens,
  };
}

function compress(history: readonly HistoryItem[], keepRecent: number): { history: HistoryItem[]; compressed: number } {
  const observations = history.map((h, i) => (h.kind === "observation" ? i : -1)).filter((i) => i >= 0);
  const kept = new Set<number>(observations.slice(Math.max(0, observations.length - keepRecent)));
  const seenTools = new Set<string>();
  for (let k = observations.length - 1; k >= 0; k -= 1) {
    const item = history[observations[k]!]!;
    if (item.kind === "observation" && !seenTools.has(item.tool)) {
      seenTools.add(item.tool);
      kept.add(observations[k]!);
    }
  }
  let compressed = 0;
  const out = history.map((h, i) => {
    if (h.kind !== "observation" || kept.has(i) || isSummary(h.envelope.data)) return h;
    compressed += 1;
    return { ...h, envelope: summarise(h.envelope) };
  });
  return { history: out, compressed };
}
