// Rotating the call secrets while sessions run, as an operator would with `pnpm call-keys`: the
// tools get the new key first, the orchestrator mints with it, the old one goes — and every refund
// on the way is made once. A tool refuses a key it does not hold yet by name, and the orchestrator
// sends the call again under the next key it holds; with none the tool holds, nothing is refunded.
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { envPrefixOf, newCallSecret, readCallKeys, toolCallKeys } from "@loopguard/tool-sdk";
import { TEST_AUTH_ENV, TEST_CALL_SECRETS_FILE } from "@loopguard/tool-sdk/testing";
import { afterAll, describe, expect, it } from "vitest";
import { LOW_RISK_CUSTOMER, refundsOf, startRefund, useSuite, waitForSession } from "./harness.js";

const TOOLS = ["kb-search", "billing", "risk"];
// This file's own copies of the test keys' files, which it rotates: the shared ones stay as other test files expect.
const keyDir = mkdtempSync(join(tmpdir(), "loopguard-rotation-keys-"));
afterAll(() => rmSync(keyDir, { recursive: true, force: true }));
const secretsFile = join(keyDir, "call-secrets.json");
copyFileSync(TEST_CALL_SECRETS_FILE, secretsFile);
const toolKeysEnv = Object.fromEntries(
  TOOLS.map((tool) => {
    const variable = `${envPrefixOf(tool)}_CALL_KEYS_FILE`;
    const file = join(keyDir, `call-keys-${tool}.json`);
    copyFileSync(TEST_AUTH_ENV[variable]!, file);
    return [variable, file];
  }),
);

const suite = useSuite({ tools: { env: toolKeysEnv }, orchestrator: { LOOPGUARD_CALL_SECRETS_FILE: secretsFile } });
const ORDER = "ord_DEMO00000001";
type Jwk = Record<string, unknown>;

/** Written whole then renamed, as `pnpm call-keys` does, so a follower never reads half a file. */
function writeJson(file: string, value: unknown): void {
  writeFileSync(`${file}.tmp`, JSON.stringify(value));
  renameSync(`${file}.tmp`, file);
}

/** What the operator's Secrets now hold: the orchestrator's secrets, and each tool's keys under `toolSecrets`. */
async function deploy(orchestratorSecrets: Jwk[], toolSecrets: Jwk[]): Promise<void> {
  writeJson(secretsFile, { keys: orchestratorSecrets });
  const derivedFrom = readCallKeys({ keys: toolSecrets });
  for (const tool of TOOLS)
    writeJson(toolKeysEnv[`${envPrefixOf(tool)}_CALL_KEYS_FILE`]!, toolCallKeys(derivedFrom, tool));
  // Every service looks at its followed files at most once a second.
  await new Promise((r) => setTimeout(r, 1200));
}

async function refund(amountCents: number) {
  const id = await startRefund(suite.orch.api, ORDER, amountCents, LOW_RISK_CUSTOMER);
  return waitForSession(suite.orch.api, id);
}

describe("call secret rotation", () => {
  it("new key to the tools, then to the orchestrator, then the old one removed: every refund made once", async () => {
    const [old] = (JSON.parse(readFileSync(secretsFile, "utf8")) as { keys: Jwk[] }).keys as [Jwk];
    const next = newCallSecret("rotated-next") as Jwk;
    expect((await refund(101)).state).toBe(SessionState.DONE);
    await deploy([old], [old, next]);
    expect((await refund(102)).state).toBe(SessionState.DONE);
    await deploy([next, old], [old, next]);
    expect((await refund(103)).state).toBe(SessionState.DONE);
    await deploy([next], [next]);
    expect((await refund(104)).state).toBe(SessionState.DONE);

    // Too early: the orchestrator mints with a key no tool holds yet (its Secret updated before the
    // tools' reached their pods). Each tool refuses it by name, and is sent its calls again at once
    // under the next key the orchestrator holds, which it does hold: the refund is made, once.
    await deploy([newCallSecret("not-yet-given") as Jwk, next], [next]);
    expect((await refund(105)).state).toBe(SessionState.DONE);
    const told = suite.orch.logs.filter((line) => line.includes("does not hold call key not-yet-given yet"));
    expect(told.map((line) => JSON.parse(line).tool).sort()).toEqual(["billing", "kb-search", "risk"]);
    // With no key the tool holds, the engineer paged sees which key and which tool: the tool's own reason.
    await deploy([newCallSecret("never-given") as Jwk], [next]);
    const refused = await refund(106);
    expect(refused.state).not.toBe(SessionState.DONE);
    expect(refused.answer).toMatch(
      /^kb_search_search did not accept the session's credential: .*call key never-given is not one held by kb-search/,
    );
    const made = (await refundsOf(suite.tools, ORDER))
      .map((r) => Number(r.amountCents))
      .filter((c) => c > 100 && c < 110);
    expect(made.sort()).toEqual([101, 102, 103, 104, 105]);
  });
});
