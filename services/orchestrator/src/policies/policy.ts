// What a policy is: the model's side of a session. It only decides; the host observes,
// executes, updates state and decides to stop (DESIGN, principle 1).
import type { Context } from "@opentelemetry/api";
import type { JsonObject, JsonValue } from "../store/session-store.js";

/** A tool as the model sees it: name, description and a JSON schema, nothing else. */
export interface ToolSpec {
  /** Model-visible name, "<tool>_<method in snake case>" (OpenAI function-name safe). */
  readonly name: string;
  readonly description: string;
  /** JSON Schema (draft 2020-12 subset) of the arguments, derived from the request message and its rules. */
  readonly parameters: JsonObject;
  /** Set while the tool's breaker is open: the host sends no call to it before this time (ISO 8601). */
  readonly unavailableUntil?: string;
}

/** The result envelope of one tool call, as appended to the session and shown to the policy. */
export interface ResultEnvelope {
  readonly ok: boolean;
  readonly data?: JsonValue;
  readonly error?: {
    /** EINVAL, ENOTOOL, EPERM, EPRECOND, EAPPROVAL or a gRPC code name (UNAVAILABLE, NOT_FOUND …). */
    readonly code: string;
    readonly message: string;
    readonly retryable: boolean;
    readonly suggestedAction: string;
    /** The tool's (or its breaker's) RetryInfo: no call before this long has passed. */
    readonly retryAfterMs?: number;
  };
  /** World references the result depends on, "<entity>:<id>[@<version>]" each (see world-refs.ts). */
  readonly refs: readonly string[];
  readonly costMicros: number;
  readonly servedFrom: "live" | "cache" | "degraded" | "none";
  /** When the data was true: now for a live answer, when it was given live for a cached one. */
  readonly observedAt: string;
  /** A cached answer's age when it was served. */
  readonly ageMs?: number;
  /** The host's word on a fallback: why the live answer is missing, and what this answer is (and is not). */
  readonly note?: string;
}

/** An age as people say it: "12 seconds", "14 minutes", "2 hours". */
export function ageInWords(ms: number): string {
  const units: [number, string][] = [
    [3_600_000, "hour"],
    [60_000, "minute"],
    [1000, "second"],
  ];
  for (const [size, name] of units) {
    const n = Math.floor(ms / size);
    if (n >= 1 || size === 1000) return `${n} ${name}${n === 1 ? "" : "s"}`;
  }
  return "0 seconds";
}

export type HistoryItem =
  | { readonly kind: "call"; readonly callId: string; readonly tool: string; readonly arguments: string }
  | {
      readonly kind: "observation";
      readonly callId: string;
      readonly tool: string;
      readonly envelope: ResultEnvelope;
      /** How long the tool call took, for the session's health score. */
      readonly latencyMs?: number;
    }
  /** Plain text the policy produced that the host did not accept as a final answer, with why. */
  | { readonly kind: "rejected_answer"; readonly text: string; readonly why: string };

export interface PolicyInput {
  readonly goal: string;
  readonly task: JsonObject;
  readonly tools: readonly ToolSpec[];
  readonly history: readonly HistoryItem[];
  /** 1-based number of the step being decided. */
  readonly step: number;
  /** The prompt's size as the host counted it (model-tokens.ts), for policies that report no usage. */
  readonly promptTokens?: number;
  /** The reply's token limit: the host checked that the prompt leaves room for it. */
  readonly maxOutputTokens?: number;
  /** The session's wall clock left: a model call must end within it. */
  readonly timeoutMs?: number;
  /**
   * The step's span, parent of a model call's span and its `traceparent`: given explicitly because
   * without telemetry on no context manager carries the active span across awaits.
   */
  readonly traceContext?: Context;
}

export interface ToolCallRequest {
  /** Unique within the session (the model's tool_call id, or one the host made). */
  readonly id: string;
  readonly name: string;
  /** Raw JSON text as the model produced it; the host parses and validates it. */
  readonly arguments: string;
  /** Set by the host when the arguments were larger than the tool accepts: their size in bytes; `arguments` then holds only their beginning. */
  readonly argumentsBytes?: number;
}

export interface TokenUsage {
  readonly input: number;
  readonly output: number;
}

export type Decision =
  | {
      readonly kind: "tool_calls";
      readonly calls: readonly ToolCallRequest[];
      /** What the model wrote beside its calls: never shown to anyone, but output it was paid for (see modelSpend). */
      readonly text?: string;
      readonly usage: TokenUsage;
      /** 0..1 when the policy reports it; below the threshold an irreversible action waits for a human. */
      readonly confidence?: number;
      /** What the policy is unsure of about these calls; the approval's reason quotes it. */
      readonly uncertaintyReason?: string;
      readonly promptHash: string;
    }
  | {
      /** The policy believes the goal is met; the host checks before accepting. */
      readonly kind: "final";
      readonly answer: string;
      /** 0..1; below the threshold a question's outcome is partial (see session/outcome.ts). */
      readonly confidence?: number;
      /** Why the confidence is not 1, e.g. "the knowledge base answered from its cache"; empty when sure. */
      readonly uncertaintyReason?: string;
      readonly usage: TokenUsage;
      readonly promptHash: string;
    };

export interface Policy {
  readonly name: string;
  /** The model it calls, when it calls one: its price (model-prices.ts) is what a step costs. */
  readonly model?: string;
  /** Throws only for transport failures (the host retries or fails the session); malformed model output is still a Decision. */
  decide(input: PolicyInput, signal: AbortSignal): Promise<Decision>;
}
