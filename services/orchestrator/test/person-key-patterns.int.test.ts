// A person's key speaks for one person: a JWKS that binds a person key to a subject pattern
// ("oidc:*", "*") — which would let its one holder read and cancel anyone's sessions and approve as
// a second person what it started — stops the orchestrator at start, and a running orchestrator
// following its JWKS file keeps the keys it had, so that key's tokens are refused by the API.
import { renameSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { refusal, tempDir } from "@loopguard/test-kit";
import {
  CallError,
  createRawClient,
  mintToken,
  newKeyPair,
  signingKeyFromJwk,
  status,
  withBinding,
} from "@loopguard/tool-sdk";
import { TEST_PUBLIC_KEYS } from "@loopguard/tool-sdk/testing";
import { afterAll, describe, expect, it } from "vitest";
import { useSuite } from "./harness.js";

const dir = tempDir("person-key-patterns");
afterAll(() => dir.remove());
const jwksFile = `${dir.dir}/jwks.json`;
writeFileSync(jwksFile, JSON.stringify(TEST_PUBLIC_KEYS));
const suite = useSuite({ orchestrator: { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: jwksFile } });

const wild = newKeyPair("wild-person");
/** The test keys and a person key bound to a pattern, as an older JWKS (or a hand edit) could hold it. */
const withWildPerson = (subject: string) => ({
  keys: [
    ...TEST_PUBLIC_KEYS.keys,
    withBinding(wild.publicJwk, { role: "person", subject, scopes: ["sessions:read", "sessions:write"] }),
  ],
});

async function asWild(subject: string) {
  const token = await mintToken(signingKeyFromJwk(wild.privateJwk), {
    subject,
    audience: "orchestrator",
    scopes: ["sessions:read", "sessions:write"],
    ttlSeconds: 600,
  });
  return createRawClient(OrchestratorService, suite.orch.server.address, { token });
}

describe("a person key bound to a subject pattern", () => {
  it("stops an orchestrator at start, naming the key", async () => {
    for (const subject of ["oidc:*", "*"]) {
      const start = suite.startOrchestrator({ LOOPGUARD_JWKS: JSON.stringify(withWildPerson(subject)) });
      const refused = await start.then(
        () => "started",
        (error: Error) => error.message,
      );
      expect(refused).toContain(
        `key wild-person of the JWKS: a person key is bound to exactly one subject, never a pattern: "${subject}"`,
      );
    }
  });

  it("is not taken from a followed JWKS file: its tokens are refused by the API as UNAUTHENTICATED, whoever they name", async () => {
    writeFileSync(`${jwksFile}.tmp`, JSON.stringify(withWildPerson("oidc:*")));
    renameSync(`${jwksFile}.tmp`, jwksFile);
    await sleep(1100);
    for (const subject of ["oidc:alice", "oidc:m-2"]) {
      const api = await asWild(subject);
      try {
        const error = await refusal(api.listSessions({ pageSize: 10 }), CallError);
        expect([error.code, error.reason]).toEqual([status.UNAUTHENTICATED, "CREDENTIALS_INVALID"]);
      } finally {
        api.close();
      }
    }
    const reload = suite.orch.logs.map((l) => JSON.parse(l)).find((l) => l.msg === "trusted keys not reloaded");
    expect(reload?.reason).toMatch(/key wild-person of the JWKS: a person key is bound to exactly one subject/);
    // The keys read before stay: the test people still get in.
    await expect(suite.orch.api.listSessions({ pageSize: 10 })).resolves.toBeDefined();
  });
});
