// What a failed chat-completions request becomes: a PolicyUnavailableError that says whether the
// session runner may retry it and after how long, without the API key and with a short reason.
import { REDACTED } from "@loopguard/tool-sdk";
import { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import { ResponseTooLargeError } from "./bounded-fetch.js";
import { PolicyUnavailableError } from "./policy-unavailable.js";

const ERROR_DETAIL_MAX_CHARS = 300;
/**
 * The shortest run of the API key's characters masked on its own: an endpoint may echo a key cut
 * short or by its ends ("sk-proj-…cafebabe"); a shorter run says too little of a key to hide.
 */
const KEY_FRAGMENT_CHARS = 8;

/** A call its deadline cut off: the endpoint may have read the prompt, so it is charged; tried again within budget. */
export function timedOut(timeoutMs: number): PolicyUnavailableError {
  return new PolicyUnavailableError(`chat completions timed out after ${timeoutMs} ms`, {
    retryable: true,
    promptRead: true,
  });
}

/** What the SDK threw, as the PolicyUnavailableError the session runner retries or gives up on. */
export function unavailable(err: unknown, timeoutMs: number, apiKey: string | undefined): PolicyUnavailableError {
  const tooLarge = err instanceof APIConnectionError ? err.cause : err;
  // Not retried: the same model asked the same question again would most likely run away again.
  if (tooLarge instanceof ResponseTooLargeError)
    return new PolicyUnavailableError(tooLarge.message, { retryable: false, promptRead: true });
  if (err instanceof APIConnectionTimeoutError) return timedOut(timeoutMs);
  if (err instanceof APIError && err.status !== undefined) {
    const retryAfterMs = err.headers ? parseRetryAfter(err.headers) : undefined;
    const message = `chat completions returned HTTP ${err.status}${errorDetail(err, apiKey)}`;
    return new PolicyUnavailableError(withoutKey(message, apiKey), {
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
  return new PolicyUnavailableError(withoutKey(`chat completions request failed: ${reason}`, apiKey), {
    retryable: true,
  });
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
function errorDetail(err: APIError, apiKey: string | undefined): string {
  // The SDK's message is "<status> <the body's error.message, or the body itself>". The key is
  // masked before the cut: cut first, a key echoed across the limit would lose too few characters.
  const detail = wholeKeysMasked(err.message.slice(String(err.status).length).replace(/\s+/g, " ").trim(), apiKey);
  if (detail === "" || detail === "status code (no body)") return "";
  return `: ${detail.length > ERROR_DETAIL_MAX_CHARS ? `${detail.slice(0, ERROR_DETAIL_MAX_CHARS)}…` : detail}`;
}

const wholeKeysMasked = (text: string, apiKey: string | undefined) =>
  apiKey ? text.split(apiKey).join(REDACTED) : text;

/**
 * `text` without the API key: each whole copy masked, and each run of KEY_FRAGMENT_CHARS or more
 * of its characters in order, such as what an endpoint left of a key it cut or masked itself. Run on
 * the short message only: every position costs a look into the key.
 */
export function withoutKey(text: string, apiKey: string | undefined): string {
  let out = wholeKeysMasked(text, apiKey);
  if (!apiKey || apiKey.length < KEY_FRAGMENT_CHARS) return out;
  for (let i = 0; i + KEY_FRAGMENT_CHARS <= out.length; i += 1) {
    if (!apiKey.includes(out.slice(i, i + KEY_FRAGMENT_CHARS))) continue;
    let end = i + KEY_FRAGMENT_CHARS;
    while (end < out.length && apiKey.includes(out.slice(i, end + 1))) end += 1;
    out = out.slice(0, i) + REDACTED + out.slice(end);
    i += REDACTED.length - 1;
  }
  return out;
}

function describeNetworkError(err: unknown): string {
  const code = err instanceof Error ? (err.cause as { code?: unknown } | undefined)?.code : undefined;
  if (typeof code === "string") return code;
  return err instanceof Error ? err.message : String(err);
}
