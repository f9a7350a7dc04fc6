// Context governance: the session layer (messages) is compressible, the control layer is not.
// When the history grows past a threshold, old observations keep their outcome and world
// references but lose their payload; at 80% of the model's window an alarm is raised. The
// latest observation of each tool is never compressed: policies and preconditions read it.
import { estimateTokens } from "./budget.js";
import { historyJsonLength } from "./history-json.js";
import type { HistoryItem } from "./policy.js";
import type { JsonObject } from "./session-store.js";

export interface ContextLimits {
  /** History size (estimated tokens) above which old observations are compressed. */
  readonly compressAboveTokens: number;
  /** The model's context window; an alarm is raised at 80% of it. */
  readonly windowTokens: number;
  /** Observations kept whole, newest first. */
  readonly keepRecent: number;
}

export const DEFAULT_CONTEXT_LIMITS: ContextLimits = Object.freeze({ compressAboveTokens: 8000, windowTokens: 128_000, keepRecent: 4 });

export interface Governed {
  readonly history: HistoryItem[];
  readonly tokens: number;
  readonly compressed: number;
  /** True when the history is at or above 80% of the window after compression. */
  readonly alarm: boolean;
}

/** estimateTokens(JSON.stringify(history)), from the items' cached lengths. */
function historyTokens(history: readonly HistoryItem[]): number {
  return estimateTokens(historyJsonLength(history));
}

export function governContext(history: readonly HistoryItem[], limits: ContextLimits): Governed {
  let tokens = historyTokens(history);
  let compressed = 0;
  let out = [...history];
  if (tokens > limits.compressAboveTokens) {
    const observations = out.map((h, i) => (h.kind === "observation" ? i : -1)).filter((i) => i >= 0);
    const latestPerTool = new Set<number>();
    const seenTools = new Set<string>();
    for (let k = observations.length - 1; k >= 0; k -= 1) {
      const item = out[observations[k]!]!;
      if (item.kind === "observation" && !seenTools.has(item.tool)) {
        seenTools.add(item.tool);
        latestPerTool.add(observations[k]!);
      }
    }
    const old = new Set(observations.slice(0, Math.max(0, observations.length - limits.keepRecent)).filter((i) => !latestPerTool.has(i)));
    out = out.map((h, i) => {
      if (!old.has(i) || h.kind !== "observation" || h.envelope.data === undefined) return h;
      compressed += 1;
      const summary = JSON.stringify(h.envelope.data).slice(0, 160);
      return { ...h, envelope: { ...h.envelope, data: { compressed: true, summary } as JsonObject } };
    });
    tokens = historyTokens(out);
  }
  return { history: out, tokens, compressed, alarm: tokens >= 0.8 * limits.windowTokens };
}
