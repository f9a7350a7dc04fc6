// `pnpm loopguard` against real processes, with the local suite's keys as `pnpm start` makes them:
// the CLI signs with the operator key, grants a session only the scopes it asks for, and approves
// as a second subject, after showing the action and asking (or with --yes).
import { execFile } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureLocalKeys } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { processFixture, type ProcessTools } from "./process-fixture.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const CLI = join(root, "services", "orchestrator", "dist", "cli", "loopguard.js");
const { tempDir, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("cli");

let dataDir: string;
let address: string;
let tools: ProcessTools;

beforeAll(async () => {
  dataDir = tempDir("data");
  const keys = ensureLocalKeys(dataDir);
  const auth = { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: keys.jwks };
  tools = await startTools(0, auth);
  const orchestrator = await startOrchestrator(tools, { ...auth, LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator, LOOPGUARD_DATA_DIR: tempDir("orchestrator") });
  address = orchestrator.address;
});
afterAll(cleanUp);

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return cliAt(address, ...args);
}

function cliAt(addr: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = execFile(process.execPath, [CLI, ...args, "--addr", addr], { env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir, USER: "alice" }, timeout: 60_000 }, (error, stdout, stderr) =>
      done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end();
  });
}

const example = (name: string) => join(root, "examples", name);

describe("pnpm loopguard", () => {
  it("runs the README's refund to DONE, and show names who started it", async () => {
    const run = await cli("run", "Refund 5.00 USD of order ord_DEMO00000001: it arrived damaged", "--task-file", example("refund-task.json"), "--wait", "--json");
    expect(run.stderr).toBe("");
    const session = JSON.parse(run.stdout) as { session_id: string; state: string; answer: string };
    expect(session.state).toBe("DONE");
    expect(session.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
    expect((await cli("show", session.session_id)).stdout).toContain("created   by cli:alice");
  });

  it("refuses to give a session an operator scope, naming it", async () => {
    const run = await cli("run", "escalate", "--scope", "kb:read", "--scope", "tool:admin");
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^loopguard: PERMISSION_DENIED SCOPE_NOT_GRANTABLE: .*tool:admin/);
  });

  it("approve shows the action and asks; without a terminal and without --yes it decides nothing", async () => {
    const run = await cli("run", "Refund ord_DEMO00000008", "--task-file", example("high-risk-refund-task.json"), "--json");
    const id = (JSON.parse(run.stdout) as { session_id: string }).session_id;
    let shown = "";
    for (let i = 0; i < 100 && !shown.includes("AWAITING_APPROVAL"); i += 1) shown = (await cli("show", id)).stdout;
    expect(shown).toContain("AWAITING_APPROVAL");

    const unconfirmed = await cli("approve", id);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stdout).toContain("action    billing_refund");
    expect(unconfirmed.stdout).not.toContain("110101199810246781");
    expect(unconfirmed.stderr).toBe("loopguard: approve and deny ask for confirmation: run them in a terminal or pass --yes\n");
    expect((await cli("show", id)).stdout).toContain("AWAITING_APPROVAL");

    const approved = await cli("approve", id, "--yes", "--reason", "verified by phone");
    expect(approved.stderr).toBe("");
    expect(approved.stdout).toMatch(/approved billing_refund for ses_/);
    let done = "";
    for (let i = 0; i < 100 && !done.includes("DONE"); i += 1) done = (await cli("show", id)).stdout;
    expect(done).toMatch(/state +DONE \(done\)/);
    const trace = await cli("trace", id);
    expect(trace.code).toBe(0);
  });
});

describe("pnpm loopguard run --wait with a model", () => {
  it("prints the answer with the task's own personal data, which the model and the orchestrator only hold as placeholders", async () => {
    const chat = await startFakeChatServer([() => chatCompletion({ content: "Checked customer {{task.phone}} (id {{task.id_card}})." })]);
    onCleanUp(() => chat.close());
    const keys = ensureLocalKeys(dataDir);
    const env = { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: keys.jwks, LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator, LOOPGUARD_DATA_DIR: tempDir("model"), OPENAI_BASE_URL: chat.baseUrl };
    const withModel = (await startOrchestrator(tools, env)).address;
    const run = await cliAt(withModel, "run", "Check customer 138 0013 8000", "--task-file", example("refund-task.json"), "--policy", "openai", "--wait", "--json");
    expect(run.stderr).toBe("");
    const session = JSON.parse(run.stdout) as { session_id: string; answer: string };
    expect(session.answer).toBe("Checked customer +8613800138000 (id 110101198003121232).");
    expect((await cliAt(withModel, "show", session.session_id)).stdout).toContain("answer    Checked customer {{task.phone}} (id {{task.id_card}}).");
    expect(chat.requests[0]!.text).toContain("Goal: Check customer {{task.phone}}");
    expect(chat.requests[0]!.text).not.toMatch(/13800138000|110101198003121232/);
  });
});
