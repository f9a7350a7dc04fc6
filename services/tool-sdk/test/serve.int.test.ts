import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { Metadata } from "@grpc/grpc-js";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterEach, describe, expect, it } from "vitest";
import { mintToken, newKeyPair, signingKeyFromJwk } from "../src/auth.js";
import { CallError, createRawClient } from "../src/raw-client.js";
import { status, ToolError } from "../src/errors.js";
import type { ToolHandlers } from "../src/serve.js";
import { checkHealth, metricValue, startTestTool, type TestTool, testToken } from "../src/testing.js";

type KbHandlers = ToolHandlers<typeof KbSearchService>;

const hit = { docId: "refund-policy", version: 1, title: "Refund policy", snippet: "…", score: 1.5, category: "policy" };
const okHandlers: KbHandlers = { search: async (req) => ({ hits: [hit].slice(0, req.limit) }) };

let tool: TestTool<typeof KbSearchService> | undefined;
afterEach(async () => {
  await tool?.close();
  tool = undefined;
});

async function start(handlers: KbHandlers, options = {}) {
  tool = await startTestTool({ service: KbSearchService, handlers }, options);
  return tool;
}

async function failure(promise: Promise<unknown>): Promise<CallError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(CallError);
  return error as CallError;
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("serveTool", () => {
  it("serves a valid request", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const res = await client.search({ query: "refund", limit: 3 });
    expect(res.hits.map((h) => h.docId)).toEqual(["refund-policy"]);
  });

  it("refuses a request without a token as UNAUTHENTICATED", async () => {
    const t = await start(okHandlers);
    const client = createRawClient(KbSearchService, t.address);
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.UNAUTHENTICATED);
    expect(error.reason).toBe("CREDENTIALS_INVALID");
    client.close();
  });

  it("refuses a token signed with a key outside its JWKS as UNAUTHENTICATED", async () => {
    const t = await start(okHandlers);
    const intruder = signingKeyFromJwk(newKeyPair("test-key").privateJwk);
    const token = await mintToken(intruder, { subject: "intruder", audience: "kb-search", scopes: ["kb:read"] });
    const client = createRawClient(KbSearchService, t.address, { token });
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.UNAUTHENTICATED);
    client.close();
  });

  it("refuses a valid token issued for another service as UNAUTHENTICATED, naming this one", async () => {
    const t = await start(okHandlers);
    const token = await testToken({ subject: "session:ses_x", audience: "billing", scopes: ["kb:read"] });
    const client = createRawClient(KbSearchService, t.address, { token });
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.UNAUTHENTICATED);
    expect(error.message).toContain("kb-search");
    client.close();
  });

  it("refuses a caller without the method's scope as PERMISSION_DENIED", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["billing:read"]);
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.PERMISSION_DENIED);
    expect(error.reason).toBe("SCOPE_MISSING");
  });

  it("rejects an invalid request with INVALID_ARGUMENT naming each broken field, before the handler runs", async () => {
    let calls = 0;
    const t = await start({ search: async () => ((calls += 1), { hits: [] }) });
    const client = await t.client(["kb:read"]);
    const error = await failure(client.search({ query: "", limit: 11 }));
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("REQUEST_INVALID");
    expect(error.fieldViolations.map((v) => v.field).sort()).toEqual(["limit", "query"]);
    expect(calls).toBe(0);
  });

  it("withholds a response that breaks its contract: INTERNAL / CONTRACT_VIOLATION", async () => {
    const t = await start({ search: async () => ({ hits: [{ ...hit, snippet: "x".repeat(1001) }] }) });
    const client = await t.client(["kb:read"]);
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.INTERNAL);
    expect(error.reason).toBe("CONTRACT_VIOLATION");
    expect(error.message).not.toContain("xxxx");
    expect(metricValue(await t.server.metrics.registry.metrics(), "loopguard_tool_contract_violations_total")).toBe(1);
  });

  it("turns an unexpected exception into INTERNAL with a generic message, logged with the trace id", async () => {
    const t = await start({
      search: async () => {
        throw new TypeError("secret internals at /srv/app.js:12");
      },
    });
    const client = await t.client(["kb:read"]);
    const metadata = new Metadata();
    metadata.set("traceparent", traceparent);
    const error = await failure(client.search({ query: "refund", limit: 3 }, { metadata }));
    expect(error.code).toBe(status.INTERNAL);
    expect(error.message).not.toContain("secret");
    expect(error.message).not.toContain("TypeError");
    const line = t.logs.find((l) => l.msg === "unexpected exception in handler");
    expect(line?.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
  });

  it("keeps a domain error's code, reason and RetryInfo", async () => {
    const t = await start({
      search: async () => {
        throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index is rebuilding", { retryAfterMs: 1500 });
      },
    });
    const client = await t.client(["kb:read"]);
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.reason).toBe("INDEX_UNAVAILABLE");
    expect(error.domain).toBe("kb.loopguard.dev");
    expect(error.retryAfterMs).toBe(1500);
  });

  it("masks an id card or mobile a handler's error echoes, in the message and field violations", async () => {
    const t = await start({
      search: async (req) => {
        throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `no customer ${req.query}`, {
          fieldViolations: [{ field: "query", description: `"${req.query}" is a phone number, id 11010519491231002x` }],
          metadata: { customer: req.query },
        });
      },
    });
    const client = await t.client(["kb:read"]);
    for (const phone of ["(139)12345678", "+86 (139) 1234-5678"]) {
      const error = await failure(client.search({ query: phone, limit: 3 }));
      expect(error.code).toBe(status.INVALID_ARGUMENT);
      expect(error.message).toBe("no customer [redacted]");
      expect(error.fieldViolations).toEqual([{ field: "query", description: '"[redacted]" is a phone number, id [redacted]' }]);
    }
  });

  it("maps a reason outside the contract's closed set to INTERNAL", async () => {
    const t = await start({
      search: async () => {
        throw new ToolError(status.NOT_FOUND, "MADE_UP_REASON", "nope");
      },
    });
    const client = await t.client(["kb:read"]);
    const error = await failure(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(status.INTERNAL);
  });

  it("counts every call in grpc_server_handled_total by method and code", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const n = 17;
    await Promise.all(Array.from({ length: n }, () => client.search({ query: "refund", limit: 1 })));
    await failure(client.search({ query: "", limit: 1 }));
    const page = await t.server.metrics.registry.metrics();
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(n);
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "INVALID_ARGUMENT" })).toBe(1);
    const http = await fetch(`http://127.0.0.1:${t.server.metricsPort}/metrics`).then((r) => r.text());
    expect(metricValue(http, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(n);
  });

  it("sheds calls past the concurrency limit with RESOURCE_EXHAUSTED and RetryInfo, without queueing", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const t = await start({ search: async () => (await gate, { hits: [] }) }, { maxConcurrent: 2, shedRetryAfterMs: 250 });
    const client = await t.client(["kb:read"]);
    const calls = Array.from({ length: 10 }, () => client.search({ query: "refund", limit: 1 }).then(() => "ok", (e: CallError) => e));
    await sleep(200);
    expect(t.server.inFlight()).toBe(2);
    release();
    const results = await Promise.all(calls);
    const shed = results.filter((r): r is CallError => r instanceof CallError);
    expect(results.filter((r) => r === "ok")).toHaveLength(2);
    expect(shed).toHaveLength(8);
    for (const e of shed) {
      expect(e.code).toBe(status.RESOURCE_EXHAUSTED);
      expect(e.reason).toBe("OVERLOADED");
      expect(e.retryAfterMs).toBe(250);
    }
  });

  it("gives the handler the caller's deadline and aborts it when the deadline passes", async () => {
    let seen: { deadline?: Date; aborted?: boolean } = {};
    const t = await start({
      search: async (_req, ctx) => {
        seen.deadline = ctx.deadline;
        await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
        seen.aborted = ctx.signal.aborted;
        return { hits: [] };
      },
    });
    const client = await t.client(["kb:read"]);
    const before = Date.now();
    const error = await failure(client.search({ query: "refund", limit: 1 }, { deadline: 150 }));
    expect(error.code).toBe(status.DEADLINE_EXCEEDED);
    expect(Date.now() - before).toBeLessThan(1000);
    await sleep(50);
    expect(seen.deadline!.getTime() - before).toBeLessThanOrEqual(200);
    expect(seen.aborted).toBe(true);
  });

  it("injects faults switched at run time through ToolAdminService", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const adminToken = await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] });
    const admin = createRawClient(ToolAdminService, t.address, { token: adminToken });
    await admin.setFaults({ profile: { outage: true, retryAfterMs: 30_000 } });
    const error = await failure(client.search({ query: "refund", limit: 1 }));
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.reason).toBe("FAULT_INJECTED");
    expect(error.retryAfterMs).toBe(30_000);

    await admin.setFaults({ profile: { addedLatencyMs: 120 } });
    const started = Date.now();
    await client.search({ query: "refund", limit: 1 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(110);

    await admin.setFaults({ profile: {} });
    expect((await admin.getFaults({})).profile?.addedLatencyMs).toBe(0);
    await client.search({ query: "refund", limit: 1 });
    const reader = createRawClient(ToolAdminService, t.address, { token: await testToken({ subject: "reader", scopes: ["kb:read"] }) });
    const denied = await failure(reader.setFaults({ profile: { outage: true } }));
    expect(denied.code).toBe(status.PERMISSION_DENIED);
    reader.close();
    admin.close();
  });

  it("reports SERVING, then NOT_SERVING while draining; in-flight calls finish, new ones are refused", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const t = await start({ search: async () => (await gate, { hits: [hit] }) });
    const client = await t.client(["kb:read"]);
    expect(await checkHealth(t.address)).toBe("SERVING");
    expect(await checkHealth(t.address, KbSearchService.typeName)).toBe("SERVING");
    const inFlight = client.search({ query: "refund", limit: 1 });
    await sleep(100);
    const stopping = t.server.shutdown();
    await sleep(50);
    expect(await checkHealth(t.address)).toBe("NOT_SERVING");
    const refused = await failure(client.search({ query: "refund", limit: 1 }));
    expect(refused.code).toBe(status.UNAVAILABLE);
    expect(refused.reason).toBe("SHUTTING_DOWN");
    release();
    expect((await inFlight).hits).toHaveLength(1);
    await stopping;
  });

  const bufCurl = (...args: string[]) => {
    const require = createRequire(import.meta.url);
    const buf = join(dirname(require.resolve("@bufbuild/buf/package.json")), "bin", "buf");
    return promisify(execFile)(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args]);
  };

  it("answers server reflection (buf curl lists the contract and the admin service)", async () => {
    const t = await start(okHandlers);
    const { stdout } = await bufCurl("--list-methods", `http://${t.address}`);
    expect(stdout).toContain("loopguard.kb.v1.KbSearchService/Search");
    expect(stdout).toContain("loopguard.tool.v1.ToolAdminService/SetFaults");
  });

  it("lists grpc.health.v1.Health in reflection, so the health check can be called by name", async () => {
    const t = await start(okHandlers);
    const { stdout: services } = await bufCurl("--list-services", `http://${t.address}`);
    expect(services.split("\n")).toContain("grpc.health.v1.Health");
    const { stdout: answer } = await bufCurl("-d", JSON.stringify({ service: "loopguard.kb.v1.KbSearchService" }), `http://${t.address}/grpc.health.v1.Health/Check`);
    expect(JSON.parse(answer)).toEqual({ status: "SERVING" });
  });
});
