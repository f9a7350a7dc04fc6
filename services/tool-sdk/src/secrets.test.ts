import { describe, expect, it } from "vitest";
import { REDACTED, redactText } from "./pii.js";
import { replaceSecrets } from "./secrets.js";

const JWT = "eyJhbGciOiJFZERTQSIsImtpZCI6InJlcXVlc3Rlci0xIn0.eyJzdWIiOiJyZXF1ZXN0ZXIifQ.c2lnbmF0dXJlc2lnbmF0dXJl";

describe("replaceSecrets", () => {
  it.each([
    ["a JWT", `token=${JWT}&x=1`, `token=${REDACTED}&x=1`],
    ["a JWT glued to a name by an underscore", `access_token_${JWT}`, `access_token_${REDACTED}`],
    ["an unsigned JWT", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0. is unsigned", `${REDACTED} is unsigned`],
    ["a bearer JWT", `Authorization: Bearer ${JWT}`, `Authorization: Bearer ${REDACTED}`],
    ["an opaque bearer token", "header bearer 2YotnFZFEjr1zCsicMWpAA", `header bearer ${REDACTED}`],
    ["a bearer token in capitals", "BEARER abc.def-123_xyz=", `BEARER ${REDACTED}`],
    ["HTTP Basic credentials", "Authorization: Basic dXNlcjpwYXNz", `Authorization: Basic ${REDACTED}`],
    ["Basic credentials in lower case", "auth=basic YWxpY2U6czNjcjN0IQ==;", `auth=basic ${REDACTED};`],
    ["Basic credentials in capitals", '"BASIC Ym9iOmh1bnRlcjI="', `"BASIC ${REDACTED}"`],
    ["an OpenAI key", "key sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789.", `key ${REDACTED}.`],
    ["an Anthropic key", "sk-ant-api03-AbCdEfGhIjKlMnOpQrSt", REDACTED],
    ["a Stripe secret key", "stripe sk_live_51HqLyjWDarjtT1zdp7dc", `stripe ${REDACTED}`],
    [
      "a GitHub token",
      "ghp_abcdefghijklmnopqrstuvwxyz0123456789 and github_pat_11ABCDEFG0123456789_abcdef",
      `${REDACTED} and ${REDACTED}`,
    ],
    ["a Slack token", "xoxb-123456789012-abcdefghij", REDACTED],
    ["an AWS access key id", "aws AKIAIOSFODNN7EXAMPLE", `aws ${REDACTED}`],
    ["a Google API key", "AIzaSyA-1234567890abcdefghijklmnopqrstu", REDACTED],
    ["a GitLab token", "glpat-abcdefghij0123456789", REDACTED],
    ["a percent-encoded bearer JWT", `Authorization=Bearer%20${JWT}`, `Authorization=Bearer%20${REDACTED}`],
    ["a bearer token in mixed case", "Authorization: BeArEr abcdefgh12345678", `Authorization: BeArEr ${REDACTED}`],
    ["Basic credentials in mixed case", "bAsIc YWxpY2U6czNjcjN0IQ==", `bAsIc ${REDACTED}`],
    [
      "a URL's password",
      "postgres://app:Sup3rS3cret@db:5432/loopguard failed",
      `postgres://app:${REDACTED}@db:5432/loopguard failed`,
    ],
  ])("masks %s", (_what, text, masked) => {
    expect(replaceSecrets(text, REDACTED)).toBe(masked);
  });

  it("leaves prose about tokens, and words that only hold a prefix, alone", () => {
    const untouched = [
      "use a Bearer token, or Bearer authentication",
      "Basic authentication and basic information, the Basic plan, basic 2FA",
      "tool risk-query-sk-abcdefghijklmnopqrs, task-sk-abcdefghijklmnopqrs",
      "desk_live_abcdefghijklmnop, AKIA1234 is short",
      "eyJhbGciOiJFZERTQSJ9 is a header alone",
      "heyJude.mp3.bak and keyJar.v2.txt are file names",
      "x0eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln is inside a longer token",
      "https://kb.example:8443/articles/12 and postgres://db:5432/loopguard hold no password",
    ];
    for (const text of untouched) expect(replaceSecrets(text, REDACTED)).toBe(text);
  });

  it("is what redactText masks along with personal data", () => {
    expect(redactText(`call 13800138000 with Bearer ${JWT}`)).toBe(`call ${REDACTED} with Bearer ${REDACTED}`);
  });

  it("leaves a step record's identifiers whole", () => {
    const record = JSON.stringify({
      session_id: "ses_01JD8Z6Q0R4T5V7W9X2Y3Z4A5B",
      decision: { kind: "tool_call", id: "call_2_0", name: "kb_search_search" },
      prompt_hash: "4b6f0c2e9a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b",
      traceparent: "00-ac09a81508038a8cd16222381507dadc-00f067aa0ba902b7-01",
      refs: ["kb:refund-policy@1"],
      at: "2026-11-29T10:15:42.125Z",
    });
    expect(redactText(record)).toBe(record);
  });
});
