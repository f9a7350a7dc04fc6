// The Connect routes on the HTTP port (serveTool's `connect` option) through a real Connect
// client over HTTP/1.1: the same chain as gRPC answers them — auth and scope, validation, error
// details, deadline, metrics.
import { BadRequestSchema, ErrorInfoSchema } from "@loopguard/proto/gen/google/rpc/error_details_pb";
import { create, toBinary } from "@bufbuild/protobuf";
import { KbSearchService, SearchRequestSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { connect } from "node:net";
import { gzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import type { ToolHandlers } from "../src/serve.js";
import { metricValue, SAMPLE_HIT, startTestTool, testToken, type TestTool } from "../testing/index.js";

const handlers: ToolHandlers<typeof KbSearchService> = {
  search: async (req, ctx) => {
    if (req.query === "slow")
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
    return { hits: [SAMPLE_HIT].slice(0, req.limit) };
  },
};

let tool: TestTool<typeof KbSearchService> | undefined;
afterEach(async () => {
  await tool?.close();
  tool = undefined;
});

async function connectClient(scopes: string[] | undefined, useBinaryFormat = false) {
  tool = await startTestTool({ service: KbSearchService, handlers }, { connect: true });
  const token = scopes && (await testToken({ subject: "test", scopes, audience: "kb-search" }));
  const transport = createConnectTransport({
    baseUrl: `http://127.0.0.1:${tool.server.metricsPort}`,
    httpVersion: "1.1",
    useBinaryFormat,
    interceptors: token
      ? [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${token}`);
            return next(req);
          },
        ]
      : [],
  });
  return createClient(KbSearchService, transport);
}

/** POSTs `body` to the tool's Search on its HTTP port as JSON (unless `headers` say otherwise), with `headers` beside. */
function postSearch(body: string | Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${tool!.server.metricsPort}/${KbSearchService.typeName}/Search`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
}

/** The error a call that must fail ends with. */
const refusal = (call: Promise<unknown>): Promise<ConnectError> =>
  call.then(
    () => Promise.reject(new Error("the call was answered")),
    (error: unknown) => ConnectError.from(error),
  );

describe("Connect on the HTTP port", () => {
  it("answers a call in JSON and in binary, counted in the same RPC metrics as gRPC calls", async () => {
    for (const binary of [false, true]) {
      const client = await connectClient(["kb:read"], binary);
      expect((await client.search({ query: "refund", limit: 3 })).hits.map((h) => h.docId)).toEqual(["refund-policy"]);
      const page = await (await fetch(`http://127.0.0.1:${tool!.server.metricsPort}/metrics`)).text();
      expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(1);
      await tool!.close();
      tool = undefined;
    }
  });

  it("refuses a call without a token as unauthenticated, with the contract's ErrorInfo", async () => {
    const client = await connectClient(undefined);
    const error = await refusal(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(Code.Unauthenticated);
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "CREDENTIALS_INVALID",
      domain: "kb.loopguard.dev",
    });
  });

  it("refuses a token without the method's scope as permission denied", async () => {
    const client = await connectClient(["billing:refund"]);
    const error = await refusal(client.search({ query: "refund", limit: 3 }));
    expect(error.code).toBe(Code.PermissionDenied);
    expect(error.rawMessage).toContain('"kb:read"');
  });

  it("refuses an invalid request with the contract's field violations", async () => {
    const client = await connectClient(["kb:read"]);
    const error = await refusal(client.search({ query: "", limit: 11 }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(
      error
        .findDetails(BadRequestSchema)[0]
        ?.fieldViolations.map((v) => v.field)
        .sort(),
    ).toEqual(["limit", "query"]);
  });

  it("refuses JSON that does not decode as invalid argument naming the problem: unknown field, wrong type, not JSON", async () => {
    await connectClient(["kb:read"]);
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    const post = async (body: string) => {
      const res = await postSearch(body, { authorization: `Bearer ${token}` });
      return { status: res.status, json: (await res.json()) as { code: string; message: string; details: unknown[] } };
    };
    const unknown = await post('{"query":"refund","limit":3,"colour":"red"}');
    expect([unknown.status, unknown.json.code, unknown.json.message]).toEqual([
      400,
      "invalid_argument",
      "the request is not a SearchRequest: colour is not a field of SearchRequest",
    ]);
    expect(unknown.json.details).toContainEqual(
      expect.objectContaining({
        type: "google.rpc.BadRequest",
        debug: { fieldViolations: [{ field: "colour", description: "is not a field of SearchRequest", reason: "" }] },
      }),
    );
    expect(unknown.json.details).toContainEqual(
      expect.objectContaining({ debug: { reason: "REQUEST_INVALID", domain: "kb.loopguard.dev", metadata: {} } }),
    );
    const typed = await post('{"query":"refund","limit":"three"}');
    expect([typed.status, typed.json.message]).toEqual([
      400,
      "the request is not a SearchRequest: limit must be a number",
    ]);
    const malformed = await post('{"query":(139)12345678}');
    expect([malformed.status, malformed.json.code, malformed.json.message]).toEqual([
      400,
      "invalid_argument",
      "the request is not a SearchRequest: the body is not valid JSON (Unexpected token '(')",
    ]);
    expect(JSON.stringify(malformed.json)).not.toMatch(/12345678|at .*\.(ts|js):\d+/);
    const metrics = await (await fetch(`http://127.0.0.1:${tool!.server.metricsPort}/metrics`)).text();
    expect(metricValue(metrics, "grpc_server_handled_total", { grpc_method: "Search" })).toBe(0);
  });

  it("checks the caller's token before reading the body: without one that verifies, any body is refused 401 unread", async () => {
    await connectClient(undefined);
    // A few KB of gzip that decompress to 3 MiB of JSON: decoded, it would hold the event loop for seconds.
    const bomb = gzipSync(Buffer.from(`{"query":"q","limit":1,"x":[${Array(750_000).fill('"a"').join(",")}]}`));
    expect(bomb.length).toBeLessThan(10_000);
    const forged = await testToken({ subject: "test", scopes: ["kb:read"], audience: "billing" });
    for (const authorization of [undefined, "Bearer junk", `Bearer ${forged}`]) {
      for (const [body, headers] of [
        [bomb, { "content-encoding": "gzip" }],
        ["{not json", {}],
        [new Uint8Array([0x0a, 0xc8, 0x01, 0x41]), { "content-type": "application/proto" }],
      ] as const) {
        const res = await postSearch(body, { ...headers, ...(authorization ? { authorization } : {}) });
        const json = (await res.json()) as { code: string };
        expect([authorization, res.status, json.code, res.headers.get("www-authenticate")]).toEqual([
          authorization,
          401,
          "unauthenticated",
          "Bearer",
        ]);
      }
    }
    const get = await fetch(
      `http://127.0.0.1:${tool!.server.metricsPort}/${KbSearchService.typeName}/Search?connect=v1&encoding=proto&base64=1&message=!!!!`,
    );
    expect(get.status).toBe(401);
    // Counted as the chain counts its refusals: a flood of them shows on the dashboards and alerts.
    const page = await (await fetch(`http://127.0.0.1:${tool!.server.metricsPort}/metrics`)).text();
    expect(
      metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "UNAUTHENTICATED" }),
    ).toBe(10);
  });

  it("refuses a body past four times the method's limit unread, 400 REQUEST_TOO_LARGE, compressed or not", async () => {
    await connectClient(["kb:read"]);
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    const big = `{"query":"q","limit":1,"x":"${"a".repeat(70_000)}"}`;
    const plain = await postSearch(big, { authorization: `Bearer ${token}` });
    const refused = (await plain.json()) as { code: string; message: string; details: unknown[] };
    expect([plain.status, refused.code, refused.message]).toEqual([
      400,
      "invalid_argument",
      "the body of Search is over 65536 bytes; Search accepts a SearchRequest of at most 16384 bytes in protobuf's binary form",
    ]);
    expect(refused.details).toContainEqual(
      expect.objectContaining({ debug: expect.objectContaining({ reason: "REQUEST_TOO_LARGE" }) }),
    );
    const zipped = await postSearch(gzipSync(Buffer.from(big)), {
      authorization: `Bearer ${token}`,
      "content-encoding": "gzip",
    });
    expect([zipped.status, ((await zipped.json()) as { code: string }).code]).toEqual([400, "invalid_argument"]);
  });

  it("answers hostile bodies 400 invalid_argument, small and without the personal data they hold", async () => {
    await connectClient(undefined);
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    const post = async (body: string | Uint8Array, headers: Record<string, string> = {}) => {
      const res = await postSearch(body, { authorization: `Bearer ${token}`, ...headers });
      return { status: res.status, text: await res.text() };
    };
    // Keys that are a mobile number and an id card: echoed as field names, they must be masked too.
    const personal = await post('{"13800138000":1,"110101198003121232":2}');
    expect(personal.status).toBe(400);
    expect(personal.text).not.toMatch(/13800138000|110101198003121232/);
    expect(Buffer.from(personal.text).toString("base64")).not.toContain(Buffer.from("13800138000").toString("base64"));
    const many = await post(`{${Array.from({ length: 6_000 }, (_, i) => `"k${i}":0`).join(",")}}`);
    expect([many.status, many.text.length < 10_000]).toEqual([400, true]);
    const deep = await post(`{"query":"q","limit":1,"x":${'{"a":'.repeat(1000)}1${"}".repeat(1000)}}`);
    expect([deep.status, JSON.parse(deep.text).code]).toEqual([400, "invalid_argument"]);
    const gzip = gzipSync(Buffer.from('{"query":"refund","limit":1}'));
    const cut = await post(gzip.subarray(0, gzip.length - 6), { "content-encoding": "gzip" });
    expect([cut.status, JSON.parse(cut.text).code]).toEqual([400, "invalid_argument"]);
    // Binary bytes that are no SearchRequest (field 1 says 200 bytes follow; one does), as gRPC answers them.
    const binary = await post(new Uint8Array([0x0a, 0xc8, 0x01, 0x41]), { "content-type": "application/proto" });
    expect([binary.status, JSON.parse(binary.text).code, JSON.parse(binary.text).message]).toEqual([
      400,
      "invalid_argument",
      "the request's 4 bytes are not a SearchRequest in protobuf's binary form",
    ]);
    // A SearchRequest repeated past Search's 16 KiB (the last query wins, so its re-encoding is small): as gRPC, too large.
    const one = toBinary(SearchRequestSchema, create(SearchRequestSchema, { query: "r".repeat(500), limit: 3 }));
    const repeated = Buffer.concat(Array.from({ length: 80 }, () => one));
    const large = await post(repeated, { "content-type": "application/proto" });
    expect([large.status, JSON.parse(large.text).message]).toEqual([
      400,
      `SearchRequest is ${repeated.length} bytes; Search accepts at most 16384`,
    ]);
    // The same bytes by GET (Search has no side effects, so Connect serves it by GET too), base64url or as text.
    const get = async (query: string) => {
      const res = await fetch(
        `http://127.0.0.1:${tool!.server.metricsPort}/${KbSearchService.typeName}/Search?connect=v1&encoding=proto&${query}`,
        { headers: { authorization: `Bearer ${token}` } },
      );
      return [res.status, ((await res.json()) as { code: string }).code];
    };
    const bytes = Buffer.from([0x0a, 0xc8, 0x01, 0x41]);
    expect(await get(`base64=1&message=${bytes.toString("base64url")}`)).toEqual([400, "invalid_argument"]);
    expect(await get(`message=${encodeURIComponent("\n\u00c8\u0001A")}`)).toEqual([400, "invalid_argument"]);
  });

  it("answers a GET whose message is not base64 400 at once, in either encoding", async () => {
    await connectClient(undefined);
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    for (const encoding of ["proto", "json"]) {
      const res = await fetch(
        `http://127.0.0.1:${tool!.server.metricsPort}/${KbSearchService.typeName}/Search?connect=v1&encoding=${encoding}&base64=1&message=!!!!`,
        { signal: AbortSignal.timeout(5000), headers: { authorization: `Bearer ${token}` } },
      );
      expect([encoding, res.status, await res.json()]).toEqual([
        encoding,
        400,
        expect.objectContaining({
          code: "invalid_argument",
          message: "the message parameter is not base64url (base64=1)",
        }),
      ]);
    }
  });

  it("takes a timeout as long as a timer can wait, refuses a longer one, and answers one that has passed deadline exceeded", async () => {
    await connectClient(["kb:read"]);
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    const search = async (timeoutMs: string) => {
      const res = await postSearch('{"query":"refund","limit":1}', {
        authorization: `Bearer ${token}`,
        "connect-timeout-ms": timeoutMs,
      });
      return [res.status, ((await res.json()) as { code?: string }).code];
    };
    // 24.8 days: answered. Connect's header allows 10 digits (115 days), which a timer fired at once for.
    expect(await search("2147483647")).toEqual([200, undefined]);
    expect(await search("9999999999")).toEqual([400, "invalid_argument"]);
    expect(await search("0")).toEqual([504, "deadline_exceeded"]);
  });

  it("answers a request whose body never ends 408 once its time to arrive is over, and shuts down without waiting for it", async () => {
    tool = await startTestTool({ service: KbSearchService, handlers }, { connect: true, httpRequestTimeoutMs: 1000 });
    const token = await testToken({ subject: "test", scopes: ["kb:read"], audience: "kb-search" });
    const started = Date.now();
    const stalled = (): Promise<string> =>
      new Promise((done) => {
        const socket = connect(tool!.server.metricsPort, "127.0.0.1", () =>
          socket.write(
            `POST /${KbSearchService.typeName}/Search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
              "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
          ),
        );
        let text = "";
        socket.on("data", (chunk) => (text += chunk.toString()));
        socket.on("close", () => done(text.split("\r\n")[0] ?? ""));
        socket.on("error", () => undefined);
      });
    expect(await stalled()).toBe("HTTP/1.1 408 Request Timeout");
    expect(Date.now() - started).toBeLessThan(5000);
    // One left stalled when the server stops: the shutdown closes it rather than wait for it.
    const left = stalled();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const stopping = Date.now();
    await tool.close();
    tool = undefined;
    expect(Date.now() - stopping).toBeLessThan(1000);
    await left;
  });

  it("ends a call at the caller's timeout with deadline exceeded", async () => {
    const client = await connectClient(["kb:read"]);
    const error = await refusal(client.search({ query: "slow", limit: 1 }, { timeoutMs: 200 }));
    expect(error.code).toBe(Code.DeadlineExceeded);
  });

  it("answers a method the contract lacks 404 with a message naming it", async () => {
    await connectClient(["kb:read"]);
    const res = await fetch(`http://127.0.0.1:${tool!.server.metricsPort}/${KbSearchService.typeName}/Searh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect([res.status, await res.json()]).toEqual([
      404,
      { code: "not_found", message: 'loopguard.kb.v1.KbSearchService has no method "Searh"' },
    ]);
  });

  it("leaves other paths of the HTTP port alone", async () => {
    await connectClient(["kb:read"]);
    const base = `http://127.0.0.1:${tool!.server.metricsPort}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect(
      (
        await fetch(`${base}/loopguard.tool.v1.ToolAdminService/GetFaults`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        })
      ).status,
    ).toBe(404);
  });
});
