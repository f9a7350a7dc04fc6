// The error of a model's policy that could not produce a decision. A module apart from
// openai-errors.ts, so that reading a chat reply (chat-reply.ts) does not load the `openai` SDK.
import type { TokenUsage } from "./policy.js";

/** The endpoint could not produce a decision: HTTP error, timeout, network failure or a body that is not a chat completion. */
export class PolicyUnavailableError extends Error {
  override readonly name = "PolicyUnavailableError";
  readonly retryable: boolean;
  /** From `retry-after-ms` / `retry-after` when the endpoint sent one. */
  readonly retryAfterMs: number | undefined;
  /** HTTP status when there was a response. */
  readonly status: number | undefined;
  /**
   * The model read the prompt, though no decision came of it: the request timed out after it was
   * sent, or its answer came too large, not JSON or without a message. The host charges its prompt
   * as it would read it, or `usage`.
   */
  readonly promptRead: boolean;
  /** What an answer no decision came of reported it used (0 and 0 when it said nothing). */
  readonly usage: TokenUsage | undefined;

  constructor(
    message: string,
    opts: {
      retryable: boolean;
      retryAfterMs?: number;
      status?: number;
      promptRead?: boolean;
      usage?: TokenUsage;
      cause?: unknown;
    },
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.retryable = opts.retryable;
    this.retryAfterMs = opts.retryAfterMs;
    this.status = opts.status;
    this.promptRead = opts.promptRead ?? false;
    this.usage = opts.usage;
  }
}
