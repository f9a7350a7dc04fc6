// The test key pairs: what test services verify with and what test orchestrators and people sign
// with; and the test call secret, with every contract tool's key derived from it.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isMainThread } from "node:worker_threads";
import { contractFiles } from "@loopguard/proto";
import {
  envPrefixOf,
  newCallSecret,
  newKeyPair,
  publicKeySet,
  readCallKeys,
  type SigningKey,
  servicePolicy,
  signingKeyFromJwk,
  toolCallKeys,
  toolServicesOf,
  withBinding,
} from "@loopguard/tool-sdk";

const orchestratorPair = newKeyPair("test-orchestrator");
/** The test orchestrator's key (role orchestrator, subject "session:*"): test orchestrators sign their sessions' tool calls with it; boundToken too. */
export const TEST_ORCHESTRATOR_KEY = signingKeyFromJwk(orchestratorPair.privateJwk);

/**
 * The test people, one key pair each, bound (role person, any scope) to exactly that subject: as in a
 * deployment, a person's key signs for its one subject only (never a pattern). testToken and test
 * clients sign with the key of the subject they name; a test that needs another person adds it here.
 */
export const TEST_PEOPLE: readonly string[] = [
  // people of the tool-sdk, tool and e2e tests
  "test",
  "alice",
  "bob",
  "orchestrator",
  "reader",
  "drill",
  "agent-7",
  "crash-test",
  "replica-test",
  "mcp-client",
  "load-operator",
  "load-approver",
  ...[0, 1, 2, 3].map((i) => `load-watcher-${i}`),
  "prometheus-test",
  // people of the orchestrator's tests (and its process fixtures' default subjects)
  "test-approver",
  "operator",
  "second",
  "second-operator",
  "second-approver",
  "someone-else",
  "intern",
  "owner",
  "stranger",
  "approver",
  ...["alice", "bob", "carol", "dave", "erin"].map((name) => `quota-${name}`),
  ...["test", "alice", "bob", "browser", "plots", "reader"].map((name) => `ops:${name}`),
  "cli",
  "outcome",
  "charges",
];
const peoplePairs = new Map(
  TEST_PEOPLE.map((subject) => [subject, newKeyPair(subject === "test" ? "test-people" : `test-person-${subject}`)]),
);
const peopleKeys = new Map([...peoplePairs].map(([subject, pair]) => [subject, signingKeyFromJwk(pair.privateJwk)]));

/** The key of the test person `subject` (one of TEST_PEOPLE), bound to that subject only. */
export function testPersonKey(subject: string): SigningKey {
  const key = peopleKeys.get(subject);
  if (!key)
    throw new Error(
      `no test person "${subject}": a person's key is bound to one subject, so add "${subject}" to TEST_PEOPLE in services/tool-sdk/testing/keys.ts`,
    );
  return key;
}

/** The test person "test"'s key (kid "test-people"): testToken's default signer. */
export const TEST_PEOPLE_KEY = testPersonKey("test");
/** What every test service verifies with: the orchestrator's key and every test person's, bound. */
export const TEST_PUBLIC_KEYS = publicKeySet({
  keys: [
    withBinding(orchestratorPair.publicJwk, { role: "orchestrator", subject: "session:*", scopes: ["*"] }),
    ...[...peoplePairs].map(([subject, pair]) =>
      withBinding(pair.publicJwk, { role: "person", subject, scopes: ["*"] }),
    ),
  ],
});
// Named with this process's id: the run's temp-folder check passes over the folder of a process still
// running (vitest ends its idle workers only as the run ends).
const keyDir = mkdtempSync(join(tmpdir(), `loopguard-test-keys-${process.pid}-`));
// The services a test starts read these files until the test stops them, so the folder goes with this
// process: on its exit, or on the signal that ends it (vitest ends its forks with SIGTERM, which skips
// 'exit' listeners), then ending it as the signal would have unless someone else handles it.
const removeKeyDir = () => rmSync(keyDir, { recursive: true, force: true });
if (isMainThread) {
  process.once("exit", removeKeyDir);
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.once(signal, () => {
      removeKeyDir();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
} else {
  // A thread gets neither: vitest's threads pool ends it with terminate(). Each test file there imports
  // this module afresh (isolated), so the folder goes once that file's tests are done.
  (await import("vitest")).afterAll(removeKeyDir);
}
/** The test orchestrator's call secrets (its LOOPGUARD_CALL_SECRETS_FILE). */
export const TEST_CALL_SECRETS_FILE = join(keyDir, "call-secrets.json");
const callSecrets = { keys: [newCallSecret("test-call")] };
writeFileSync(TEST_CALL_SECRETS_FILE, JSON.stringify(callSecrets), { mode: 0o600 });
/** The test call secret, for a test that mints call credentials itself. */
export const TEST_CALL_SECRETS = readCallKeys(callSecrets);

/** A test tool's call keys file (its <PREFIX>_CALL_KEYS_FILE), derived from the test call secret. */
export function testCallKeysFile(tool: string): string {
  const file = join(keyDir, `call-keys-${tool}.json`);
  writeFileSync(file, JSON.stringify(toolCallKeys(TEST_CALL_SECRETS, tool)), { mode: 0o600 });
  return file;
}

/** A test tool's call keys as serveTool takes them (ServeOptions.callKeys). */
export function testCallKeys(tool: string): { file: string; keys: ReturnType<typeof readCallKeys> } {
  return { file: testCallKeysFile(tool), keys: readCallKeys(toolCallKeys(TEST_CALL_SECRETS, tool), tool) };
}

/**
 * Environment a test service process needs to verify test tokens: the public keys, and each
 * contract tool's own call key under that tool's variable (so one environment serves every test
 * tool; a tool reads only its own, and a deployment gives each tool only its own).
 */
export const TEST_AUTH_ENV: Readonly<Record<string, string>> = {
  LOOPGUARD_JWKS: JSON.stringify(TEST_PUBLIC_KEYS),
  ...Object.fromEntries(
    toolServicesOf(contractFiles).map((service) => {
      const tool = servicePolicy(service).toolName;
      return [`${envPrefixOf(tool)}_CALL_KEYS_FILE`, testCallKeysFile(tool)];
    }),
  ),
};

let orchestratorKeyFile: string | undefined;
/** A 0600 file holding the test orchestrator's private key, for a test orchestrator's LOOPGUARD_SIGNING_KEY_FILE. */
export function testOrchestratorKeyFile(): string {
  if (!orchestratorKeyFile) {
    orchestratorKeyFile = join(keyDir, "orchestrator.jwk");
    writeFileSync(orchestratorKeyFile, JSON.stringify(orchestratorPair.privateJwk), { mode: 0o600 });
  }
  return orchestratorKeyFile;
}

/** Environment of a test orchestrator: the public keys, its private key and its call secrets. */
export function testOrchestratorEnv(): Record<string, string> {
  return {
    LOOPGUARD_JWKS: TEST_AUTH_ENV.LOOPGUARD_JWKS!,
    LOOPGUARD_SIGNING_KEY_FILE: testOrchestratorKeyFile(),
    LOOPGUARD_CALL_SECRETS_FILE: TEST_CALL_SECRETS_FILE,
  };
}
