import { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import { describe, expect, it } from "vitest";
import { ResponseTooLargeError } from "./bounded-fetch.js";
import { unavailable } from "./openai-errors.js";

const keep = (text: string) => text;

describe("unavailable", () => {
  it.each([
    {
      what: "retries a rate limit after the delay the endpoint asked for",
      thrown: new APIError(429, undefined, "slow down", new Headers({ "retry-after": "2" })),
      expected: { retryable: true, status: 429, retryAfterMs: 2000 },
      message: "chat completions returned HTTP 429: slow down",
    },
    {
      what: "prefers retry-after-ms, and retries a server error",
      thrown: new APIError(503, undefined, undefined, new Headers({ "retry-after-ms": "250.2" })),
      expected: { retryable: true, status: 503, retryAfterMs: 251 },
      message: "chat completions returned HTTP 503",
    },
    {
      what: "does not retry a client error, and never writes the API key",
      thrown: new APIError(401, undefined, "bad key sk-secret", new Headers()),
      expected: { retryable: false, status: 401 },
      message: "chat completions returned HTTP 401: bad key [redacted]",
    },
  ])("$what", ({ thrown, expected, message }) => {
    const error = unavailable(thrown, 1000, (text) => text.split("sk-secret").join("[redacted]"));
    expect(error).toMatchObject(expected);
    expect(error.message).toBe(message);
  });

  it("does not retry a reply larger than the host reads", () => {
    const error = unavailable(new APIConnectionError({ cause: new ResponseTooLargeError(10) }), 1000, keep);
    expect(error.retryable).toBe(false);
  });

  it("names a timeout by its limit, and a network failure by its code", () => {
    expect(unavailable(new APIConnectionTimeoutError(), 1500, keep).message).toBe(
      "chat completions timed out after 1500 ms",
    );
    const refused = Object.assign(new Error("connect failed"), { cause: { code: "ECONNREFUSED" } });
    const error = unavailable(new APIConnectionError({ cause: refused }), 1000, keep);
    expect(error.retryable).toBe(true);
    expect(error.message).toBe("chat completions request failed: ECONNREFUSED");
  });
});
