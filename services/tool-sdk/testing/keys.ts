// The test key pairs: what test services verify with and what test orchestrators and people sign with.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newKeyPair, publicKeySet, signingKeyFromJwk, withBinding } from "@loopguard/tool-sdk";

const orchestratorPair = newKeyPair("test-orchestrator");
const peoplePair = newKeyPair("test-people");
/** The test orchestrator's key (role orchestrator, subject "session:*"): test orchestrators sign their sessions' tool calls with it; boundToken too. */
export const TEST_ORCHESTRATOR_KEY = signingKeyFromJwk(orchestratorPair.privateJwk);
/** The test people's key (role person, any subject, any scope): testToken and test clients sign with it. */
export const TEST_PEOPLE_KEY = signingKeyFromJwk(peoplePair.privateJwk);
/** What every test service verifies with: both keys, bound. */
export const TEST_PUBLIC_KEYS = publicKeySet({
  keys: [
    withBinding(orchestratorPair.publicJwk, { role: "orchestrator", subject: "session:*", scopes: ["*"] }),
    withBinding(peoplePair.publicJwk, { role: "person", subject: "*", scopes: ["*"] }),
  ],
});
/** Environment a test service process needs to verify test tokens (public keys only). */
export const TEST_AUTH_ENV: Readonly<Record<string, string>> = { LOOPGUARD_JWKS: JSON.stringify(TEST_PUBLIC_KEYS) };

let orchestratorKeyFile: string | undefined;
/** A 0600 file holding the test orchestrator's private key, for a test orchestrator's LOOPGUARD_SIGNING_KEY_FILE. */
export function testOrchestratorKeyFile(): string {
  if (!orchestratorKeyFile) {
    orchestratorKeyFile = join(mkdtempSync(join(tmpdir(), "loopguard-test-key-")), "orchestrator.jwk");
    writeFileSync(orchestratorKeyFile, JSON.stringify(orchestratorPair.privateJwk), { mode: 0o600 });
  }
  return orchestratorKeyFile;
}

/** Environment of a test orchestrator: the public keys, and the private key it signs tool tokens with. */
export function testOrchestratorEnv(): Record<string, string> {
  return { ...TEST_AUTH_ENV, LOOPGUARD_SIGNING_KEY_FILE: testOrchestratorKeyFile() };
}
