// The MCP gateway against the real suite (three tools and an orchestrator as processes, the local
// people's keys as `pnpm start` makes them), driven by the official SDK's own client: stdio through
// the real `pnpm -s mcp`, streamable HTTP through `--http` with bearer tokens.
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { freePort, kill, repoRoot, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  createRawClient,
  ensureLocalKeys,
  mintToken,
  newKeyPair,
  personKey,
  signingKeyFromJwk,
} from "@loopguard/tool-sdk";
import {
  spawnTool,
  startTool,
  testOrchestratorEnv,
  toolAddressEnv,
  TOOLS,
  workspaceService,
} from "@loopguard/tool-sdk/testing";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const GATEWAY = join(repoRoot, "services", "mcp-gateway", "dist", "main.js");
const processes: ServiceProcess[] = [];
const closers: (() => Promise<void>)[] = [];
const onCleanUp = (close: () => Promise<void>) => closers.push(close);
const dirs = [tempDir("e2e"), tempDir("e2e"), tempDir("e2e")];

let dataDir: string;
let orchestratorAddr: string;
let httpUrl: URL;

/** The environment of `pnpm -s mcp` in a checkout where `pnpm start` runs the suite. */
function gatewayEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env = Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[1] !== undefined));
  return { ...env, LOOPGUARD_DATA_DIR: dataDir, ORCHESTRATOR_ADDR: orchestratorAddr, ...extra };
}

async function tokenOf(person: string, scopes: readonly string[]): Promise<string> {
  const key = personKey({ LOOPGUARD_DATA_DIR: dataDir }, person);
  return mintToken(key.key, { subject: key.binding.subject, audience: "orchestrator", scopes, ttlSeconds: 600 });
}

async function stdioClient(extra: Record<string, string> = {}): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: "pnpm",
    args: ["-s", "mcp"],
    cwd: repoRoot,
    env: gatewayEnv(extra),
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const client = new Client({ name: "loopguard-test", version: "1.0.0" });
  await client.connect(transport);
  onCleanUp(() => client.close());
  return { client, stderr: () => stderr };
}

interface ReceivedSpan {
  readonly service: string;
  readonly name: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
}
type OtlpTraces = {
  resourceSpans: {
    resource: { attributes: { key: string; value: { stringValue?: string } }[] };
    scopeSpans: { spans: Record<string, string>[] }[];
  }[];
};

/** The spans the orchestrator and the HTTP gateway export (OTLP http/json), as a collector would get them. */
const spans: ReceivedSpan[] = [];
const receiver = createServer((req, res) => {
  let body = "";
  req.on("data", (chunk: Buffer) => {
    body += chunk.toString();
  });
  req.on("end", () => {
    for (const rs of (JSON.parse(body) as OtlpTraces).resourceSpans) {
      const service = rs.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue ?? "";
      for (const ss of rs.scopeSpans)
        for (const sp of ss.spans)
          spans.push({
            service,
            name: sp.name!,
            traceId: sp.traceId!,
            spanId: sp.spanId!,
            parentSpanId: sp.parentSpanId ?? "",
          });
    }
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
const otel = () => ({
  OTEL_TRACES_EXPORTER: "otlp",
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`,
  OTEL_BSP_SCHEDULE_DELAY: "100",
});

let requester: Promise<{ client: Client; stderr: () => string }> | undefined;
/** One `pnpm -s mcp` for the tests that act as the requester: starting it is the slow part. */
async function requesterClient(): Promise<Client> {
  requester ??= stdioClient();
  return (await requester).client;
}

async function httpClient(token: string | undefined): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(
    httpUrl,
    token === undefined ? {} : { requestInit: { headers: { authorization: `Bearer ${token}` } } },
  );
  const client = new Client({ name: "loopguard-test", version: "1.0.0" });
  await client.connect(transport);
  onCleanUp(() => client.close());
  return client;
}

const textOf = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");

/** An HTTP client of a requester who may grant kb:read and nothing else. */
async function kbRequester(): Promise<Client> {
  return httpClient(await tokenOf("requester", ["sessions:read", "sessions:write", "grant:kb:read"]));
}

/** One tools/call, its result typed. */
async function callTool(client: Client, request: Parameters<Client["callTool"]>[0]): Promise<CallToolResult> {
  return (await client.callTool(request)) as CallToolResult;
}

/** Makes the call, expecting an error result; its text. */
async function errorText(client: Client, request: Parameters<Client["callTool"]>[0]): Promise<string> {
  const result = await callTool(client, request);
  expect(result.isError).toBe(true);
  return textOf(result);
}

/** The search for the refund policy each transport's first test makes, with `meta` as the call's `_meta`. */
function searchRefundPolicy(client: Client, limit: number, meta?: Record<string, string>): Promise<CallToolResult> {
  const query = { name: "kb_search_search", arguments: { query: "refund policy", limit } };
  return callTool(client, meta ? { ...query, _meta: meta } : query);
}

beforeAll(async () => {
  await new Promise<void>((listening) => receiver.listen(0, "127.0.0.1", () => listening()));
  onCleanUp(() => new Promise((closed) => receiver.close(() => closed())));
  const [data, toolData, orchestratorData] = dirs.map((d) => d.dir) as [string, string, string];
  dataDir = data;
  const keys = ensureLocalKeys(dataDir);
  const auth = { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: keys.jwks };
  // One at a time: on a busy machine three starting at once can miss the start-up bound.
  const tools: Record<string, ServiceProcess> = {};
  for (const spec of TOOLS) {
    tools[spec.name] = await startTool(spec.name, toolData, 0, auth);
    processes.push(tools[spec.name]!);
  }
  // The confidence rule turned off: a forwarded irreversible call must still wait, by the guard's own rule.
  const orchestratorEnv = {
    ...testOrchestratorEnv(),
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    CONFIDENCE_THRESHOLD: "0",
    ...toolAddressEnv(tools),
    ...auth,
  };
  const orchestrator = await spawnTool(
    workspaceService("orchestrator").entry,
    {
      ...orchestratorEnv,
      ...otel(),
      LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
      LOOPGUARD_DATA_DIR: orchestratorData,
    },
    60_000,
  );
  processes.push(orchestrator);
  orchestratorAddr = orchestrator.address;

  const port = await freePort();
  const http: ChildProcess = spawn(process.execPath, [GATEWAY, "--http"], {
    env: gatewayEnv({ MCP_HTTP_PORT: String(port), ...otel() }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  onCleanUp(async () => {
    if (http.exitCode === null) {
      http.kill("SIGTERM");
      await once(http, "exit");
    }
  });
  let log = "";
  await new Promise<void>((ready, failed) => {
    http.stderr?.on("data", (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes("serving MCP over streamable HTTP")) ready();
    });
    http.once("exit", (code) => failed(new Error(`the HTTP gateway exited ${code}: ${log}`)));
  });
  httpUrl = new URL(`http://127.0.0.1:${port}/mcp`);
}, 120_000);
afterAll(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
  await Promise.all(processes.splice(0).map((p) => kill(p)));
  for (const d of dirs) d.remove();
});

describe("tools/list", () => {
  it("lists the registry's tools with their contract descriptions, input schemas and effect annotations", async () => {
    const { tools } = await (await httpClient(await tokenOf("requester", ["sessions:read"]))).listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    // The orchestrator's own registry, derived from the contracts: no second list.
    expect([...byName.keys()].sort()).toEqual(
      new ToolRegistry()
        .list()
        .map((t) => t.name)
        .sort(),
    );
    expect([...byName.keys()]).toEqual(
      expect.arrayContaining(["kb_search_search", "billing_get_order", "billing_refund", "risk_query_risk"]),
    );
    const refund = byName.get("billing_refund")!;
    expect(refund.description).toContain("irreversible");
    expect(refund.inputSchema.required).toEqual(expect.arrayContaining(["orderId", "amountCents"]));
    // The host fills the idempotency key and the amount bound; a client never sends them.
    expect(Object.keys(refund.inputSchema.properties ?? {})).not.toContain("idempotencyKey");
    expect(refund.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, idempotentHint: false });
    expect(byName.get("kb_search_search")!.annotations).toMatchObject({
      readOnlyHint: true,
      destructiveHint: false,
      idempotentHint: true,
    });
    expect(byName.get("kb_search_search")!.inputSchema.properties).toHaveProperty("query");
  });
});

describe("stdio: pnpm -s mcp as the local requester", () => {
  it("searches the knowledge base as a one-call session and returns its hits", async () => {
    const result = await searchRefundPolicy(await requesterClient(), 3);
    expect(result.isError).toBeFalsy();
    const structured = result.structuredContent as {
      sessionId: string;
      state: string;
      result: { hits: { docId: string }[] };
    };
    expect(structured.state).toBe("DONE");
    expect(structured.result.hits.map((h) => h.docId)).toContain("refund-policy");
    expect(textOf(result)).toContain("refund-policy");
  });

  it("a refund waits for another person's approval, names the session and its expiry, and moves money only once the approver approves", async () => {
    const client = await requesterClient();
    const refundable = async () => {
      const read = await callTool(client, {
        name: "billing_get_order",
        arguments: { orderId: "ord_DEMO00000001" },
      });
      return Number(
        (read.structuredContent as { result: { order: { refundableCents: string } } }).result.order.refundableCents,
      );
    };
    const before = await refundable();
    const result = await callTool(client, {
      name: "billing_refund",
      arguments: { orderId: "ord_DEMO00000001", amountCents: 500, reason: "REFUND_REASON_DAMAGED" },
    });
    expect(result.isError).toBeFalsy();
    const waiting = result.structuredContent as {
      sessionId: string;
      state: string;
      approval: { approvalId: string; expiresAt: string };
    };
    expect(waiting.state).toBe("AWAITING_APPROVAL");
    expect(textOf(result)).toContain(`session ${waiting.sessionId} waits for approval by someone other than requester`);
    expect(Date.parse(waiting.approval.expiresAt)).toBeGreaterThan(Date.now());

    const asApprover = createRawClient(OrchestratorService, orchestratorAddr, {
      token: await tokenOf("approver", ["sessions:read", "approvals:write"]),
    });
    onCleanUp(async () => asApprover.close());
    // An approver sees the sessions waiting for someone; the requester's session is among them, not yet executed.
    const session = (await asApprover.listApprovals({})).approvals.find((a) => a.sessionId === waiting.sessionId);
    expect(session?.state).toBe(SessionState.AWAITING_APPROVAL);
    // The refund is not made; the host's two live reads before it (the order, its customer's risk) are.
    expect(session?.usage?.toolCalls).toBe(2);
    expect(session?.pendingApproval?.reason).toContain("asked for directly by an MCP client");
    expect(await refundable()).toBe(before);

    const pending = session!.pendingApproval!;
    await asApprover.resolveApproval({
      sessionId: waiting.sessionId,
      approvalId: pending.approvalId,
      argumentsHash: pending.argumentsHash,
      approve: true,
    });
    const asRequester = createRawClient(OrchestratorService, orchestratorAddr, {
      token: await tokenOf("requester", ["sessions:read"]),
    });
    onCleanUp(async () => asRequester.close());
    let done = session!;
    for (let i = 0; i < 200 && done.state !== SessionState.DONE; i += 1) {
      await new Promise((r) => setTimeout(r, 50));
      done = (await asRequester.getSession({ sessionId: waiting.sessionId })).session!;
    }
    expect(done.state).toBe(SessionState.DONE);
    expect(done.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
    expect(await refundable()).toBe(before - 500);
    // The order read again when approved, and the refund: within the session's budget of five.
    expect(done.usage?.toolCalls).toBe(4);
  });

  it("says on stderr, with the address, when the orchestrator is unreachable, and the call's result says so too", async () => {
    const addr = `127.0.0.1:${await freePort()}`;
    const { client, stderr } = await stdioClient({ ORCHESTRATOR_ADDR: addr });
    expect(await errorText(client, { name: "kb_search_search", arguments: { query: "refund" } })).toBe(
      `cannot reach the orchestrator at ${addr} (is \`pnpm start\` running?)`,
    );
    expect(stderr()).toContain(`cannot reach the orchestrator at ${addr}`);
  });

  it("writes nothing but JSON-RPC on stdout", async () => {
    const child = spawn("pnpm", ["-s", "mcp"], { cwd: repoRoot, env: gatewayEnv(), stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    const send = (message: object) => child.stdin.write(`${JSON.stringify(message)}\n`);
    send({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
    });
    send({ jsonrpc: "2.0", method: "notifications/initialized" });
    send({ jsonrpc: "2.0", id: 2, method: "tools/list" });
    send({
      jsonrpc: "2.0",
      id: 3,
      method: "tools/call",
      params: { name: "kb_search_search", arguments: { query: "refund policy" } },
    });
    for (let i = 0; i < 600 && !stdout.includes('"id":3'); i += 1) await new Promise((r) => setTimeout(r, 50));
    child.stdin.end();
    await once(child, "exit");
    const lines = stdout.split("\n").filter((l) => l !== "");
    expect(lines.map((l) => (JSON.parse(l) as { jsonrpc: string; id: number }).id)).toEqual([1, 2, 3]);
    for (const line of lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: "2.0" });
  });
});

describe("streamable HTTP: the client's bearer is the caller", () => {
  it("searches with a requester's token", async () => {
    const result = await searchRefundPolicy(await kbRequester(), 2);
    expect(result.isError).toBeFalsy();
    expect((result.structuredContent as { result: { hits: { docId: string }[] } }).result.hits[0]?.docId).toBe(
      "refund-policy",
    );
  });

  it("carries the client's traceparent (from _meta) and its own span to the orchestrator", async () => {
    const [traceId, clientSpan] = ["4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"];
    const result = await searchRefundPolicy(await kbRequester(), 3, { traceparent: `00-${traceId}-${clientSpan}-01` });
    expect(result.isError).toBeFalsy();
    const named = (service: string, name: string) =>
      spans.find((sp) => sp.service === service && sp.traceId === traceId && sp.name.endsWith(name));
    for (
      let i = 0;
      i < 100 && !(named("mcp-gateway", "kb_search_search") && named("orchestrator", "/StartSession"));
      i += 1
    )
      await new Promise((r) => setTimeout(r, 100));
    const gateway = named("mcp-gateway", "kb_search_search");
    expect(gateway?.parentSpanId).toBe(clientSpan);
    expect(named("orchestrator", "/StartSession")?.parentSpanId).toBe(gateway?.spanId);
  });

  it("a call sent again with its idempotency key in _meta is the session it started, with other arguments a refusal", async () => {
    const client = await kbRequester();
    const meta = { "loopguard/idempotency-key": `resume-${randomUUID()}` };
    const first = await searchRefundPolicy(client, 2, meta);
    const again = await searchRefundPolicy(client, 2, meta);
    const sessionOf = (r: CallToolResult) => (r.structuredContent as { sessionId: string }).sessionId;
    expect(first.isError).toBeFalsy();
    expect(sessionOf(again)).toBe(sessionOf(first));
    expect(await errorText(client, { name: "kb_search_search", arguments: { query: "other" }, _meta: meta })).toMatch(
      /^ALREADY_EXISTS IDEMPOTENCY_KEY_REUSED: /,
    );
  });

  it("refuses a call whose token may not grant the tool's scope, naming the scope", async () => {
    const text = await errorText(await kbRequester(), {
      name: "billing_refund",
      arguments: { orderId: "ord_DEMO00000001", amountCents: 100 },
    });
    expect(text).toMatch(/^PERMISSION_DENIED SCOPE_NOT_GRANTABLE: .*billing:(refund|read)/);
    expect(text).not.toMatch(/ at .*\.js:\d+/);
  });

  it("refuses a token signed by a key the orchestrator does not trust with HTTP 401, as it does no bearer, or no token", async () => {
    const stranger = signingKeyFromJwk(newKeyPair("stranger").privateJwk);
    const forged = await mintToken(stranger, {
      subject: "requester",
      audience: "orchestrator",
      scopes: ["sessions:read", "sessions:write", "grant:kb:read"],
    });
    await expect(httpClient(forged)).rejects.toThrow(/401|key .*stranger.* is not trusted/);
    await expect(httpClient(undefined)).rejects.toThrow(/401|missing bearer token/);
    await expect(httpClient("not-a-token")).rejects.toThrow(/401|bearer token refused/);
  });

  it("returns the host's argument check as an error result naming the field", async () => {
    const text = await errorText(await kbRequester(), {
      name: "kb_search_search",
      arguments: { query: "refund", limit: 1000 },
    });
    expect(text).toMatch(/^EINVAL: .*limit/);
  });
});
