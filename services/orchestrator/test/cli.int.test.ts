// `pnpm loopguard` against real processes, with the local suite's keys as `pnpm start` makes them:
// the CLI acts as one person (--as; requester by default), grants a session only the scopes it asks
// for, and approves as another person, after showing the action and asking (or with --yes). The
// same person cannot approve their own session through the CLI, the dashboard's token or the API.
import { execFile } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, ensureLocalKeys, type LocalKeys, status } from "@loopguard/tool-sdk";
import { localPersonToken } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { decisionOn, type Tools } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const CLI = join(root, "services", "orchestrator", "dist", "cli", "loopguard.js");
const { tempDir, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("cli");

let dataDir: string;
let address: string;
let httpAddress: string;
let tools: Tools;
let keys: LocalKeys;

beforeAll(async () => {
  dataDir = tempDir("data");
  keys = ensureLocalKeys(dataDir);
  const auth = { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: keys.jwks };
  tools = await startTools(0, auth);
  const orchestrator = await startOrchestrator(tools, {
    ...auth,
    LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
    LOOPGUARD_DATA_DIR: tempDir("orchestrator"),
  });
  address = orchestrator.address;
  httpAddress = `127.0.0.1:${orchestrator.metricsPort}`;
});
afterAll(cleanUp);

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return cliAt(address, ...args);
}

function cliAt(addr: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args, "--addr", addr],
      { env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir }, timeout: 60_000 },
      (error, stdout, stderr) =>
        done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end();
  });
}

function keysCli(...args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(root, "services", "tool-sdk", "dist", "cli", "keys.js"), ...args],
      { timeout: 30_000 },
      (error, _stdout, stderr) => done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stderr }),
    );
  });
}

const example = (name: string) => join(root, "examples", name);

/** Runs the README's refund to its end as the default person, answering as JSON. */
function runReadmeRefund(): Promise<{ code: number; stdout: string; stderr: string }> {
  return cli(
    "run",
    "Refund 5.00 USD of order ord_DEMO00000001: it arrived damaged",
    "--task-file",
    example("refund-task.json"),
    "--wait",
    "--json",
  );
}

/** Starts the README's high-risk refund as `person` and waits until it asks for an approval. */
async function awaitingApproval(person: string): Promise<string> {
  const run = await cli(
    "run",
    "Refund ord_DEMO00000008",
    "--task-file",
    example("high-risk-refund-task.json"),
    "--json",
    "--as",
    person,
  );
  expect(run.stderr).toBe("");
  const id = (JSON.parse(run.stdout) as { session_id: string }).session_id;
  let shown = "";
  for (let i = 0; i < 100 && !shown.includes("AWAITING_APPROVAL"); i += 1)
    shown = (await cli("show", id, "--as", person)).stdout;
  expect(shown).toContain("AWAITING_APPROVAL");
  return id;
}

describe("pnpm loopguard", () => {
  it("runs the README's refund to DONE, and show names who started it", async () => {
    const run = await runReadmeRefund();
    expect(run.stderr).toBe("");
    const session = JSON.parse(run.stdout) as { session_id: string; state: string; answer: string };
    expect(session.state).toBe("DONE");
    expect(session.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
    expect((await cli("show", session.session_id)).stdout).toContain("created   by requester");
  });

  it("shows the answer's confidence and uncertainty reason beside the outcome: --json and show", async () => {
    const sure = await runReadmeRefund();
    expect(JSON.parse(sure.stdout)).toMatchObject({
      state: "DONE",
      outcome: "succeeded",
      confidence: 0.9,
      uncertainty_reason: "",
    });
    // A question nothing in the knowledge base matches: the scripted policy says so, and the outcome is partial.
    const unsure = await cli("run", "zyxwvutsrq", "--wait", "--json");
    expect(unsure.stderr).toBe("");
    const session = JSON.parse(unsure.stdout) as Record<string, unknown>;
    expect(session).toMatchObject({
      state: "DONE",
      outcome: "partial",
      outcome_reason: "low_confidence: confidence 0.2 is below 0.6: no document in the knowledge base matched",
      confidence: 0.2,
      uncertainty_reason: "no document in the knowledge base matched",
    });
    expect((await cli("show", session.session_id as string)).stdout).toContain(
      "confidence 0.2 (no document in the knowledge base matched)",
    );
  });

  it("refuses to give a session an operator scope, naming it", async () => {
    const run = await cli("run", "escalate", "--scope", "kb:read", "--scope", "tool:admin");
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^loopguard: PERMISSION_DENIED SCOPE_NOT_GRANTABLE: .*tool:admin/);
  });

  it("answers an option without its value, or a state given by number, with the usage exit code and the option named", async () => {
    const missing = await cli("run", "goal", "--task");
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^loopguard: Option '--task[^']*' argument/);
    const numbered = await cli("sessions", "--state", "3");
    expect(numbered.code).toBe(2);
    expect(numbered.stderr).toMatch(/^loopguard: --state must be one of /);
  });

  it("approve shows the action and asks; without a terminal and without --yes it decides nothing", async () => {
    const id = await awaitingApproval("requester");

    const unconfirmed = await cli("approve", id, "--as", "approver");
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stdout).toContain("action    billing_refund");
    expect(unconfirmed.stdout).not.toContain("110101199810246781");
    expect(unconfirmed.stderr).toBe(
      "loopguard: approve and deny ask for confirmation: run them in a terminal or pass --yes\n",
    );
    expect((await cli("show", id)).stdout).toContain("AWAITING_APPROVAL");

    const approved = await cli("approve", id, "--yes", "--reason", "verified by phone", "--as", "approver");
    expect(approved.stderr).toBe("");
    expect(approved.stdout).toMatch(/approved billing_refund for ses_/);
    let done = "";
    for (let i = 0; i < 100 && !done.includes("DONE"); i += 1) done = (await cli("show", id)).stdout;
    expect(done).toMatch(/state +DONE \(done\)/);
    const trace = await cli("trace", id);
    expect(trace.code).toBe(0);
  });
});

describe("four eyes: the same person through every door", () => {
  it("lets the requester not approve at all, and the approver approve", async () => {
    const id = await awaitingApproval("requester");
    const self = await cli("approve", id, "--yes", "--as", "requester");
    expect([self.code, self.stderr]).toEqual([
      2,
      'loopguard: requester may not approve: its key does not carry "approvals:write" (approve --as approver)\n',
    ]);
    const approved = await cli("approve", id, "--yes", "--as", "approver");
    expect([approved.code, approved.stderr]).toEqual([0, ""]);
  });

  it("refuses SELF_APPROVAL to one person holding both scopes, through the CLI, the dashboard's token and the gRPC API", async () => {
    // A lead who may both start and approve: one key, so one person, whatever the door.
    const jwk = join(keys.dir, "lead.jwk");
    const grants = ["kb:read", "billing:read", "billing:refund", "risk:read"].flatMap((s) => ["--scope", `grant:${s}`]);
    const made = await keysCli(
      "new",
      "--kid",
      "lead-1",
      "--role",
      "person",
      "--subject",
      "lead",
      "--scope",
      "sessions:read",
      "--scope",
      "sessions:write",
      "--scope",
      "approvals:write",
      ...grants,
      "--private-out",
      jwk,
      "--jwks",
      keys.jwks,
    );
    expect(made.stderr).toBe("");
    await new Promise((r) => setTimeout(r, 1200)); // the services follow the JWKS file and see the new key within a second
    const id = await awaitingApproval("lead");

    const viaCli = await cli("approve", id, "--yes", "--as", "lead");
    expect([viaCli.code, viaCli.stderr]).toEqual([
      1,
      expect.stringMatching(/^loopguard: PERMISSION_DENIED SELF_APPROVAL: lead started session/),
    ]);

    const dashboard = await cli("dashboard", "--as", "lead", "--http", httpAddress);
    const token = new URL(dashboard.stdout.trim()).hash.replace(/^#token=/, "");
    // As the dashboard calls the orchestrator: Connect, JSON, the page's token.
    const asDashboard = (method: string, body: unknown) =>
      fetch(`http://${httpAddress}/${OrchestratorService.typeName}/${method}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const detail = (await (await asDashboard("GetSessionDetail", { sessionId: id })).json()) as {
      session: { pendingApproval: { approvalId: string; argumentsHash: string } };
    };
    const approval = detail.session.pendingApproval;
    const viaDashboard = await asDashboard("ResolveApproval", {
      sessionId: id,
      approve: true,
      approvalId: approval.approvalId,
      argumentsHash: approval.argumentsHash,
    });
    expect(viaDashboard.status).toBe(403);
    expect(JSON.stringify(await viaDashboard.json())).toContain("SELF_APPROVAL");

    const api = createRawClient(OrchestratorService, address, {
      token: await localPersonToken(dataDir, "lead", "orchestrator", ["sessions:read", "approvals:write"]),
    });
    try {
      const viaApi = await api.resolveApproval(decisionOn(id, approval, true)).catch((e: unknown) => e as CallError);
      expect(viaApi).toBeInstanceOf(CallError);
      expect([status[(viaApi as CallError).code], (viaApi as CallError).reason]).toEqual([
        "PERMISSION_DENIED",
        "SELF_APPROVAL",
      ]);
    } finally {
      api.close();
    }
    expect((await cli("show", id, "--as", "lead")).stdout).toContain("AWAITING_APPROVAL");
    expect((await cli("approve", id, "--yes", "--as", "approver")).stdout).toMatch(/approved billing_refund for ses_/);
  });
});

describe("pnpm loopguard run's idempotency key", () => {
  it("is made per run and printed, and a run retried with it returns the first session instead of a second", async () => {
    const goal = "How long do card refunds take?";
    const first = await cli("run", goal, "--json");
    const { session_id: id, idempotency_key: key } = JSON.parse(first.stdout) as {
      session_id: string;
      idempotency_key: string;
    };
    expect(key).toMatch(/^run-[0-9a-f-]{36}$/);
    const other = JSON.parse((await cli("run", goal, "--json")).stdout) as {
      session_id: string;
      idempotency_key: string;
    };
    expect([other.session_id, other.idempotency_key]).not.toContain(id);
    const retried = await cli("run", goal, "--idempotency-key", key);
    expect(retried.stdout).toContain(`already started (same idempotency key): ${id}`);
    expect(retried.stdout).toContain(`idempotency key ${key}`);
    const listed = JSON.parse((await cli("sessions", "--json", "--limit", "500")).stdout) as { session_id: string }[];
    expect(listed.filter((s) => s.session_id === id)).toHaveLength(1);
  });
});

describe("pnpm loopguard run --wait with a model", () => {
  it("prints the answer with the task's own personal data, which the model and the orchestrator only hold as placeholders", async () => {
    const chat = await startFakeChatServer([
      () => chatCompletion({ content: "Checked customer {{task.phone}} (id {{task.id_card}})." }),
    ]);
    onCleanUp(() => chat.close());
    const env = {
      LOOPGUARD_JWKS: "",
      LOOPGUARD_JWKS_FILE: keys.jwks,
      LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
      LOOPGUARD_DATA_DIR: tempDir("model"),
      OPENAI_BASE_URL: chat.baseUrl,
    };
    const withModel = (await startOrchestrator(tools, env)).address;
    const run = await cliAt(
      withModel,
      "run",
      "Check customer 138 0013 8000",
      "--task-file",
      example("refund-task.json"),
      "--policy",
      "openai",
      "--wait",
      "--json",
    );
    expect(run.stderr).toBe("");
    const session = JSON.parse(run.stdout) as { session_id: string; answer: string };
    expect(session.answer).toBe("Checked customer +8613800138000 (id 110101198003121232).");
    expect((await cliAt(withModel, "show", session.session_id)).stdout).toContain(
      "answer    Checked customer {{task.phone}} (id {{task.id_card}}).",
    );
    expect(chat.requests[0]!.text).toContain("Goal: Check customer {{task.phone}}");
    expect(chat.requests[0]!.text).not.toMatch(/13800138000|110101198003121232/);
  });
});
