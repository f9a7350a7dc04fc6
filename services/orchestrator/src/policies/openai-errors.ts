// What a failed chat-completions request becomes: a PolicyUnavailableError that says whether the
// session runner may retry it and after how long, without the API key and with a short reason.
import { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import { ResponseTooLargeError } from "./bounded-fetch.js";
import { PolicyUnavailableError } from "./policy-unavailable.js";

const ERROR_DETAIL_MAX_CHARS = 300;

/** A call its deadline cut off: the endpoint may have read the prompt, so it is charged; tried again within budget. */
export function timedOut(timeoutMs: number): PolicyUnavailableError {
  return new PolicyUnavailableError(`chat completions timed out after ${timeoutMs} ms`, {
    retryable: true,
    promptRead: true,
  });
}

/** What the SDK threw, as the PolicyUnavailableError the session runner retries or gives up on. */
export function unavailable(err: unknown, timeoutMs: number, redact: (text: string) => string): PolicyUnavailableError {
  const tooLarge = err instanceof APIConnectionError ? err.cause : err;
  // Not retried: the same model asked the same question again would most likely run away again.
  if (tooLarge instanceof ResponseTooLargeError)
    return new PolicyUnavailableError(tooLarge.message, { retryable: false, promptRead: true });
  if (err instanceof APIConnectionTimeoutError) return timedOut(timeoutMs);
  if (err instanceof APIError && err.status !== undefined) {
    const retryAfterMs = err.headers ? parseRetryAfter(err.headers) : undefined;
    return new PolicyUnavailableError(redact(`chat completions returned HTTP ${err.status}${errorDetail(err)}`), {
      retryable: err.status === 429 || err.status >= 500,
      status: err.status,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    });
  }
  if (err instanceof SyntaxError) {
    return new PolicyUnavailableError("chat completions returned a body that is not JSON", {
      retryable: true,
      promptRead: true,
    });
  }
  const reason = err instanceof APIConnectionError ? describeNetworkError(err.cause) : describeNetworkError(err);
  return new PolicyUnavailableError(redact(`chat completions request failed: ${reason}`), { retryable: true });
}

function parseRetryAfter(headers: Headers): number | undefined {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && ms.trim() !== "" && Number.isFinite(Number(ms)) && Number(ms) >= 0) {
    return Math.ceil(Number(ms));
  }
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? Math.ceil(seconds * 1000) : undefined;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/** A short reason from the error body (OpenAI's `{error:{message}}` or plain text), for the operator. */
function errorDetail(err: APIError): string {
  // The SDK's message is "<status> <the body's error.message, or the body itself>".
  const detail = err.message.slice(String(err.status).length).replace(/\s+/g, " ").trim();
  if (detail === "" || detail === "status code (no body)") return "";
  return `: ${detail.length > ERROR_DETAIL_MAX_CHARS ? `${detail.slice(0, ERROR_DETAIL_MAX_CHARS)}…` : detail}`;
}

function describeNetworkError(err: unknown): string {
  const code = err instanceof Error ? (err.cause as { code?: unknown } | undefined)?.code : undefined;
  if (typeof code === "string") return code;
  return err instanceof Error ? err.message : String(err);
}
