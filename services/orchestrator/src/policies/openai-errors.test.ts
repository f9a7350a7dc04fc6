import { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import { describe, expect, it } from "vitest";
import { ResponseTooLargeError } from "./bounded-fetch.js";
import { unavailable } from "./openai-errors.js";

const KEY = "9f8e7d6c5b4a39281706f5e4d3c2b1a0cafebabe";
/** Every run of 8 characters of `key`, in order. */
const fragmentsOf = (key: string) => [...Array(key.length - 7).keys()].map((i) => key.slice(i, i + 8));

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
    const error = unavailable(thrown, 1000, "sk-secret");
    expect(error).toMatchObject(expected);
    expect(error.message).toBe(message);
  });

  it("keeps no part of a key the endpoint echoes across the length limit of the reason", () => {
    for (const cut of [1, 20, 39]) {
      const pad = "x".repeat(300 - "Incorrect API key provided: ".length - (KEY.length - cut));
      const thrown = new APIError(
        401,
        undefined,
        `Incorrect API key provided: ${pad}${KEY}. See the docs.`,
        new Headers(),
      );
      const { message } = unavailable(thrown, 1000, KEY);
      expect(message).toMatch(/^chat completions returned HTTP 401: Incorrect API key provided: x+\[/);
      expect(fragmentsOf(KEY).filter((fragment) => message.includes(fragment))).toEqual([]);
    }
  });

  it("masks what is left of a key the endpoint cut or masked itself, eight characters or more", () => {
    const echoed = "Incorrect API key provided: 9f8e7d6c5b****************cafebabe; not 9f8e7d6 nor req_0cafe";
    const error = unavailable(new APIError(401, undefined, echoed, new Headers()), 1000, KEY);
    expect(error.message).toBe(
      "chat completions returned HTTP 401: Incorrect API key provided: [redacted]****************[redacted]; not 9f8e7d6 nor req_0cafe",
    );
  });

  it("does not retry a reply larger than the host reads", () => {
    const error = unavailable(new APIConnectionError({ cause: new ResponseTooLargeError(10) }), 1000, undefined);
    expect(error.retryable).toBe(false);
  });

  it("names a timeout by its limit, and a network failure by its code", () => {
    expect(unavailable(new APIConnectionTimeoutError(), 1500, undefined).message).toBe(
      "chat completions timed out after 1500 ms",
    );
    const refused = Object.assign(new Error("connect failed"), { cause: { code: "ECONNREFUSED" } });
    const error = unavailable(new APIConnectionError({ cause: refused }), 1000, undefined);
    expect(error.retryable).toBe(true);
    expect(error.message).toBe("chat completions request failed: ECONNREFUSED");
  });
});
