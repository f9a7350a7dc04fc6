// Credentials a user types into a session: a bearer JWT and an API key in the goal, secrets under
// common key names in the task. What the API serves back, the step records (GetTrace and the JSONL
// files) and the log lines hold them only redacted.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { listTraceFiles } from "../src/governance/trace-files.js";
import { useSuite, waitForSession } from "./harness.js";

const suite = useSuite();

const JWT =
  "eyJhbGciOiJFZERTQSIsImtpZCI6InJlcXVlc3Rlci0xIn0.eyJzdWIiOiJyZXF1ZXN0ZXIiLCJhdWQiOiJvcmNoZXN0cmF0b3IifQ.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl";
const API_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
const CLIENT_SECRET = "cs_live_51HqLyjWDarjtT1zdp7dc";
const SECRETS = [JWT, API_KEY, CLIENT_SECRET];

describe("secrets a user typed", () => {
  it("are redacted in GetSession, GetTrace, the JSONL traces and the logs", async () => {
    const { orch } = suite;
    const { session } = await orch.api.startSession({
      goal: `How long do card refunds take? (my token: Bearer ${JWT}, api key ${API_KEY})`,
      task: {
        access_token: JWT,
        client_secret: CLIENT_SECRET,
        refreshToken: JWT,
        "private-key": API_KEY,
        bearer: JWT,
        max_tokens: 512,
      } as never,
      scopes: ["kb:read"],
      policy: "scripted",
    });
    const id = session!.sessionId;
    const done = await waitForSession(orch.api, id);
    expect(done.goal).toBe("How long do card refunds take? (my token: Bearer [redacted], api key [redacted])");
    expect(done.task).toEqual({
      access_token: "[redacted]",
      client_secret: "[redacted]",
      refreshToken: "[redacted]",
      "private-key": "[redacted]",
      bearer: "[redacted]",
      max_tokens: 512,
    });

    const trace = (await orch.api.getTrace({ sessionId: id })).records;
    expect(trace.length).toBeGreaterThan(0);
    const files = async () =>
      (await listTraceFiles(join(orch.dataDir, "traces")))
        .flatMap((file) => readFileSync(file.path, "utf8").split("\n"))
        .filter((line) => line.includes(id));
    for (let i = 0; i < 40 && (await files()).length < trace.length; i += 1)
      await new Promise((r) => setTimeout(r, 50));
    const written = {
      getSession: JSON.stringify(done, (_k, v) => (typeof v === "bigint" ? String(v) : v)),
      getTrace: trace.join("\n"),
      jsonl: (await files()).join("\n"),
      logs: orch.logs.join("\n"),
    };
    expect(written.jsonl).not.toBe("");
    for (const [where, text] of Object.entries(written))
      for (const secret of SECRETS)
        expect.soft(text.includes(secret), `${secret.slice(0, 12)}… in ${where}`).toBe(false);
  });
});
