// The real gateway process given malformed JSON-RPC, bearers the orchestrator would refuse, a command
// line or settings it cannot use, and what its start-up lines tell an operator. No orchestrator is
// needed: the gateway points at a closed port (or one that counts connections) and these never reach it.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { copyFileSync, readFileSync, renameSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { join } from "node:path";
import { freePort, repoRoot, tempDir } from "@loopguard/test-kit";
import {
  ensureLocalKeys,
  mintToken,
  newKeyPair,
  personKey,
  signingKeyFromJwk,
  type SigningKey,
} from "@loopguard/tool-sdk";
import { OAuth2Server } from "oauth2-mock-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const GATEWAY = join(repoRoot, "services", "mcp-gateway", "dist", "main.js");
const KEYS_CLI = join(repoRoot, "services", "tool-sdk", "dist", "cli", "keys.js");
const ORCHESTRATOR_ADDR = "127.0.0.1:1";
const children: ChildProcess[] = [];
/** The local suite's data folder, as `pnpm start` leaves it: the keys the orchestrator trusts. */
const data = tempDir("mcp-http-edges");
ensureLocalKeys(data.dir);
let url: string;

/** A compact JWS with these claims and a signature nobody could check. */
function jwt(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${part({ alg: "EdDSA", typ: "JWT" })}.${part(claims)}.${Buffer.from("signature").toString("base64url")}`;
}
/** A token signed with `key` as the local requester's, for the orchestrator and current unless `claims` say otherwise. */
function requesterToken(
  key: SigningKey,
  claims: { audience?: string; expiresAt?: number; scopes?: string[] } = {},
): Promise<string> {
  return mintToken(key, {
    subject: "requester",
    audience: claims.audience ?? "orchestrator",
    scopes: claims.scopes ?? ["sessions:read", "sessions:write", "grant:kb:read"],
    expiresAt: claims.expiresAt ?? Date.now() + 600_000,
  });
}
/** The local requester's own key, in `dataDir`. */
const requesterKey = (dataDir: string) => personKey({ LOOPGUARD_DATA_DIR: dataDir }, "requester").key;
/** A bearer of the local requester: the orchestrator would take it, so the gateway lets it through. */
let BEARER: string;
/** The HTTP gateway's stderr so far. */
let httpLog: () => string = () => "";

/** What `pnpm -s mcp` finds in a checkout whose suite keeps its data in `dataDir`. */
function suiteEnv(dataDir: string): Record<string, string> {
  return {
    ORCHESTRATOR_ADDR,
    OTEL_TRACES_EXPORTER: "none",
    LOOPGUARD_DATA_DIR: dataDir,
    LOOPGUARD_JWKS_FILE: "",
    LOOPGUARD_JWKS: "",
  };
}

/** Starts the gateway and resolves with its stderr once `msg` is logged. */
async function start(args: string[], env: Record<string, string>, msg: string): Promise<() => string> {
  const child = spawn(process.execPath, [GATEWAY, ...args], {
    env: { ...process.env, ...suiteEnv(data.dir), ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr?.on("data", (c: Buffer) => {
    stderr += c.toString();
  });
  const end = Date.now() + 15_000;
  while (!stderr.includes(msg)) {
    if (Date.now() > end || child.exitCode !== null) throw new Error(`gateway did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return () => stderr;
}

function startLine(stderr: string, msg: string): Record<string, unknown> | undefined {
  return stderr
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l.msg === msg);
}

beforeAll(async () => {
  BEARER = `Bearer ${await requesterToken(requesterKey(data.dir))}`;
  const port = await freePort();
  url = `http://127.0.0.1:${port}/mcp`;
  httpLog = await start(["--http"], { MCP_HTTP_PORT: String(port) }, "serving MCP over streamable HTTP");
});
afterAll(() => {
  for (const child of children) child.kill("SIGTERM");
  data.remove();
});

async function rpc(method: string, params: unknown) {
  return (await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }))).json;
}

/** POSTs `body` as it is; the status and the JSON answer. */
async function post(body: string) {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      authorization: BEARER,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body,
  });
  return { status: res.status, json: (await res.json()) as { error?: { code: number; message: string } } };
}

/** POSTs `body` with `bearer` to `to`: the status, the JSON-RPC error's message, and the challenge if any. */
async function postAs(bearer: string, body: string, to = url) {
  const res = await fetch(to, {
    method: "POST",
    headers: {
      authorization: bearer,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body,
  });
  const json = (await res.json()) as { error?: { code: number; message: string } };
  return {
    status: res.status,
    message: json.error?.message,
    challenge: res.headers.get("www-authenticate"),
    code: json.error?.code,
  };
}

/** The status `bearer` gets, asked again until it is `wanted` or 5 s have passed (a followed JWKS is re-read within about a second). */
async function statusWithin(bearer: string, body: string, to: string, wanted: number): Promise<number> {
  let status = 0;
  for (let i = 0; i < 50 && status !== wanted; i += 1) {
    if (i > 0) await new Promise((r) => setTimeout(r, 100));
    status = (await postAs(bearer, body, to)).status;
  }
  return status;
}

/** A key the orchestrator does not trust, under a kid of its own. */
const stranger = signingKeyFromJwk(newKeyPair("stranger").privateJwk);

/** `{"a":{"a":…1…}}`, `levels` deep. */
function nested(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i += 1) value = { a: value };
  return value;
}

describe("malformed JSON-RPC over HTTP", () => {
  it.each([
    ["arguments that are not an object", { name: "kb_search_search", arguments: "x" }, "arguments must be an object"],
    ["arguments that are an array", { name: "kb_search_search", arguments: [1] }, "arguments must be an object"],
    ["no tool name", { arguments: {} }, "name must be a string"],
    ["no params", undefined, "params must be an object"],
    [
      "a task that is not an object",
      { name: "kb_search_search", task: "x" },
      "task: Invalid input: expected object, received string",
    ],
    ["an unknown tool", { name: "nope", arguments: {} }, 'unknown tool "nope"; tools/list names them'],
    [
      "an unknown tool named with a phone and an id card (masked in the echo)",
      { name: "13912345678 110101199003071234", arguments: {} },
      'unknown tool "[redacted] [redacted]"; tools/list names them',
    ],
    [
      "an unknown tool of a megabyte's name (not echoed)",
      { name: "n".repeat(500_000), arguments: {} },
      "unknown tool (a name of 500000 characters); tools/list names them",
    ],
    [
      "arguments nested 1,000 levels deep (the orchestrator's task rule, checked before protobuf's encoder recurses)",
      { name: "kb_search_search", arguments: { query: "x", x: nested(1000) } },
      "arguments: the task nests 1002 levels deep; at most 8 are accepted",
    ],
  ])("tools/call with %s is InvalidParams (-32602) in one line", async (_, params, message) => {
    expect((await rpc("tools/call", params)).error).toEqual({ code: -32602, message: `MCP error -32602: ${message}` });
  });

  it("tools/call with arguments nested 100,000 levels deep is InvalidParams naming the task rule, not an internal error", async () => {
    const params = `{"name":"kb_search_search","arguments":{"query":"x","q":${"[".repeat(100_000)}${"]".repeat(100_000)}}}`;
    const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${params}}`;
    expect((await post(body)).json.error).toEqual({
      code: -32602,
      message: "MCP error -32602: arguments: the task nests 100002 levels deep; at most 8 are accepted",
    });
  });

  it("a body it cannot take is refused before any call starts: a batch whose calls share an id (the SDK would run both and answer one), not JSON, compressed", async () => {
    const call = (query: string) => ({
      jsonrpc: "2.0",
      id: 7,
      method: "tools/call",
      params: { name: "kb_search_search", arguments: { query } },
    });
    const refused = await post(JSON.stringify([call("first"), call("second")]));
    expect([refused.status, refused.json.error?.code]).toEqual([400, -32600]);
    const notJson = await post("{not json");
    expect([notJson.status, notJson.json.error?.code]).toEqual([400, -32700]);
    const gzipped = await fetch(url, {
      method: "POST",
      headers: { authorization: BEARER, "content-type": "application/json", "content-encoding": "gzip" },
      body: "{}",
    });
    expect([gzipped.status, ((await gzipped.json()) as { error: { message: string } }).error.message]).toEqual([
      415,
      'unsupported content-encoding "gzip": send the body uncompressed',
    ]);
  });

  it("a batch whose request's id is an object 20,000 levels deep is the 400 its single form is, no failure logged", async () => {
    const request = `{"jsonrpc":"2.0","id":${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)},"method":"ping"}`;
    const single = await post(request);
    const batch = await post(`[${request}]`);
    expect([batch.status, batch.json]).toEqual([single.status, single.json]);
    expect(single.status).toBe(400);
    expect(httpLog()).not.toContain("mcp http request failed");
  });

  it("a method the gateway does not serve is MethodNotFound (-32601)", async () => {
    expect((await rpc("resources/list", {})).error?.code).toBe(-32601);
  });

  it("a request target that is no URL path is 400, the client's mistake, and logs no failure", async () => {
    const { port } = new URL(url);
    const answer = await new Promise<string>((done, fail) => {
      const socket = connect(Number(port), "127.0.0.1", () =>
        socket.end("POST //[ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
      );
      let text = "";
      socket.on("data", (chunk) => (text += chunk.toString()));
      socket.on("end", () => done(text));
      socket.on("error", fail);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toContain("the MCP endpoint is /mcp");
    expect(httpLog()).not.toContain("mcp http request failed");
  });

  it("a client that goes away in the middle of its body logs no failure of the gateway's", async () => {
    const { port } = new URL(url);
    await new Promise<void>((done) => {
      const socket = connect(Number(port), "127.0.0.1", () => {
        socket.write(
          `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${BEARER}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n` +
            '{"jsonrpc":"2.0",',
        );
        setTimeout(() => socket.destroy(), 100);
      });
      socket.on("close", () => done());
    });
    // Its handling ends once the socket's end reaches it; the line, were it logged, would be there by now.
    await new Promise((settled) => setTimeout(settled, 300));
    expect(httpLog()).not.toContain("mcp http request failed");
  });
});

describe("what the gateway reads, and from how many", () => {
  const list = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });

  it.each([
    ["no token at all", "Bearer anything", "the bearer token is malformed or not signed by a trusted key"],
    ["a token of no key, unsigned", `Bearer ${jwt({ sub: "requester" })}`, "the bearer token names no key (kid)"],
  ])("a bearer that is %s is HTTP 401 before the body is read, tools/list included", async (_, bearer, reason) => {
    expect(await postAs(bearer, list)).toMatchObject({
      status: 401,
      message: `bearer token refused: ${reason}; send a current token for the orchestrator`,
      challenge: 'Bearer realm="loopguard", error="invalid_token"',
    });
    expect((await postAs(BEARER, list)).status).toBe(200);
  });

  it.each([
    ["not a token at all", async () => "anything"],
    ["forged (signed by a key the orchestrator does not trust)", async () => requesterToken(stranger)],
  ])("a refusal of a bearer %s closes the connection rather than reading the rest of the body", async (_, token) => {
    const { port } = new URL(url);
    const authorization = `Bearer ${await token()}`;
    const answer = await new Promise<string>((closed) => {
      let text = "";
      const socket = connect(Number(port), "127.0.0.1", () =>
        socket.write(
          `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\nContent-Length: 4000000\r\n\r\n[`,
        ),
      );
      socket.on("data", (chunk) => (text += chunk.toString())).on("close", () => closed(text));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
  });

  it("a body over what the largest batch can be is 413 naming the bound; a batch of more requests than it takes, 400", async () => {
    const tooLarge = await postAs(BEARER, `${" ".repeat(1024 * 1024)}{}`);
    expect([tooLarge.status, tooLarge.message]).toEqual([413, "payload too large: the body is over 1048576 bytes"]);
    const ping = (id: number) => ({ jsonrpc: "2.0", id, method: "ping" });
    const batch = await postAs(BEARER, JSON.stringify(Array.from({ length: 33 }, (_, i) => ping(i + 1))));
    expect([batch.status, batch.message]).toEqual([400, "invalid request: a batch holds at most 32 requests"]);
    expect((await postAs(BEARER, JSON.stringify(Array.from({ length: 32 }, (_, i) => ping(i + 1))))).status).toBe(200);
  });

  it("past MCP_HTTP_MAX_CONNECTIONS a connection is closed unanswered, and one is served again once another ends", async () => {
    const port = await freePort();
    await start(
      ["--http"],
      { MCP_HTTP_PORT: String(port), MCP_HTTP_MAX_CONNECTIONS: "2" },
      "serving MCP over streamable HTTP",
    );
    const held = await Promise.all(
      [1, 2].map(
        () =>
          new Promise<Socket>((connected) => {
            const socket = connect(port, "127.0.0.1", () => {
              socket.write(
                `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${BEARER}\r\nContent-Length: 10\r\n\r\n`,
              );
              connected(socket);
            });
          }),
      ),
    );
    const ping = () =>
      fetch(`http://127.0.0.1:${port}/mcp`, {
        method: "POST",
        headers: {
          authorization: BEARER,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
      }).then((res) => res.status);
    await expect(ping()).rejects.toThrow();
    held[0]!.destroy();
    let status: number | undefined;
    for (let tries = 0; tries < 100 && status === undefined; tries += 1)
      status = await ping().catch(() => new Promise<undefined>((r) => setTimeout(() => r(undefined), 50)));
    expect(status).toBe(200);
    held[1]!.destroy();
  });
});

describe("a bearer the orchestrator would refuse is refused by the gateway, with the orchestrator's keys", () => {
  const list = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  const search = JSON.stringify({
    jsonrpc: "2.0",
    id: 2,
    method: "tools/call",
    params: { name: "kb_search_search", arguments: { query: "refund policy" } },
  });

  it.each([
    [
      "signed by a key it does not know",
      () => requesterToken(stranger),
      /^the bearer token's key .*stranger.* is not trusted/,
    ],
    [
      "signed by another key under a trusted key's kid",
      () => requesterToken(signingKeyFromJwk(newKeyPair(requesterKey(data.dir).kid).privateJwk)),
      /^the bearer token's signature does not verify with its key$/,
    ],
    [
      "signed by a trusted key but expired",
      () => requesterToken(requesterKey(data.dir), { expiresAt: Date.now() - 3_600_000 }),
      /^the bearer token expired$/,
    ],
    [
      "signed by a trusted key for another service",
      () => requesterToken(requesterKey(data.dir), { audience: "billing" }),
      /^the bearer token was issued for another service than orchestrator$/,
    ],
  ])("a bearer %s is HTTP 401 naming why, tools/list and tools/call alike", async (_, token, reason) => {
    const bearer = `Bearer ${await token()}`;
    for (const body of [list, search]) {
      const answer = await postAs(bearer, body);
      expect([answer.status, answer.code, answer.challenge]).toEqual([
        401,
        -32000,
        'Bearer realm="loopguard", error="invalid_token"',
      ]);
      const reasonOf = /^bearer token refused: (.*); send a current token for the orchestrator$/.exec(
        answer.message ?? "",
      );
      expect(reasonOf?.[1]).toMatch(reason);
    }
  });

  it("a forged bearer's call never reaches the orchestrator; a valid bearer's does", async () => {
    let connections = 0;
    const orchestrator = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((listening) => orchestrator.listen(0, "127.0.0.1", () => listening()));
    const address = `127.0.0.1:${(orchestrator.address() as { port: number }).port}`;
    try {
      const port = await freePort();
      const log = await start(
        ["--http"],
        { MCP_HTTP_PORT: String(port), ORCHESTRATOR_ADDR: address, MCP_CALL_WAIT_MS: "1000" },
        "serving MCP over streamable HTTP",
      );
      // Its start-up health check is over (and its connections counted) before the calls are made: it
      // has logged its failure, and no connection came for half a second (a reconnect the check began
      // may land after its failure, on a busy machine: seen once in a CI run).
      for (let i = 0; i < 100 && !log().includes("cannot reach the orchestrator"); i += 1)
        await new Promise((r) => setTimeout(r, 50));
      for (let seen = -1, i = 0; seen !== connections && i < 20; i += 1) {
        seen = connections;
        await new Promise((r) => setTimeout(r, 500));
      }
      const gateway = `http://127.0.0.1:${port}/mcp`;
      const before = connections;
      const forged = await postAs(`Bearer ${await requesterToken(stranger)}`, search, gateway);
      expect(forged.status).toBe(401);
      await new Promise((r) => setTimeout(r, 500));
      expect(connections).toBe(before);
      const valid = await postAs(BEARER, search, gateway);
      expect(valid.status).toBe(200);
      expect(connections).toBeGreaterThan(before);
    } finally {
      await new Promise((closed) => orchestrator.close(closed));
    }
  });

  it("after a key rotation (`pnpm keys new`, the JWKS rolled out, `pnpm keys remove` of the old key), the new key's tokens are taken and the old key's refused, without a restart", async () => {
    const suite = tempDir("mcp-rotation");
    try {
      const keys = ensureLocalKeys(suite.dir);
      const port = await freePort();
      await start(
        ["--http"],
        { ...suiteEnv(suite.dir), MCP_HTTP_PORT: String(port) },
        "serving MCP over streamable HTTP",
      );
      const gateway = `http://127.0.0.1:${port}/mcp`;
      const old = personKey({ LOOPGUARD_DATA_DIR: suite.dir }, "requester");
      const oldToken = `Bearer ${await requesterToken(old.key)}`;
      expect((await postAs(oldToken, list, gateway)).status).toBe(200);
      // The new key is made into a copy of the JWKS, which is then rolled out as one rename.
      const next = join(suite.dir, "jwks-next.json");
      const privateOut = join(suite.dir, "requester-2.jwk");
      copyFileSync(keys.jwks, next);
      const scopes = old.binding.scopes.flatMap((scope) => ["--scope", scope]);
      const keysCli = (...args: string[]) =>
        spawnSync(process.execPath, [KEYS_CLI, ...args], { encoding: "utf8", timeout: 15_000 });
      const made = keysCli(
        "new",
        "--kid",
        "requester-2",
        "--role",
        "person",
        "--subject",
        "requester",
        ...scopes,
        "--private-out",
        privateOut,
        "--jwks",
        next,
      );
      expect([made.status, made.stderr]).toEqual([0, ""]);
      const newToken = `Bearer ${await requesterToken(signingKeyFromJwk(JSON.parse(readFileSync(privateOut, "utf8"))))}`;
      expect((await postAs(newToken, list, gateway)).status).toBe(401);
      renameSync(next, keys.jwks);
      expect(await statusWithin(newToken, list, gateway, 200)).toBe(200);
      expect((await postAs(oldToken, list, gateway)).status).toBe(200);
      const removed = keysCli("remove", "--kid", old.key.kid, "--jwks", keys.jwks);
      expect([removed.status, removed.stderr]).toEqual([0, ""]);
      expect(await statusWithin(oldToken, list, gateway, 401)).toBe(401);
      expect((await postAs(newToken, list, gateway)).status).toBe(200);
    } finally {
      suite.remove();
    }
  });
});

describe("with an OpenID Connect provider, its ID tokens are verified against its JWKS as the orchestrator does", () => {
  const CLIENT_ID = "loopguard-test";
  const provider = new OAuth2Server();
  let gateway: string;
  beforeAll(async () => {
    await provider.issuer.keys.generate("RS256");
    await provider.start(0, "127.0.0.1");
    const port = await freePort();
    const env = {
      MCP_HTTP_PORT: String(port),
      ORCHESTRATOR_OIDC_ISSUER: provider.issuer.url!,
      ORCHESTRATOR_OIDC_AUDIENCE: CLIENT_ID,
    };
    await start(["--http"], env, "serving MCP over streamable HTTP");
    gateway = `http://127.0.0.1:${port}/mcp`;
  });
  afterAll(() => provider.stop());

  /** An ID token from the provider for alice holding `roles`; `change` edits its claims before signing. */
  const idToken = (roles: string[], change: (claims: Record<string, unknown>) => void = () => undefined) =>
    provider.issuer.buildToken({
      scopesOrTransform: (_header, claims) => {
        Object.assign(claims, { sub: "alice@example.com", aud: CLIENT_ID, loopguard_roles: roles });
        change(claims);
      },
    });
  const list = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  const reasonOf = async (token: string) => (await postAs(`Bearer ${token}`, list, gateway)).message;

  it("takes an ID token of a person with a role, and still a local person's token", async () => {
    expect((await postAs(`Bearer ${await idToken(["requester"])}`, list, gateway)).status).toBe(200);
    expect((await postAs(BEARER, list, gateway)).status).toBe(200);
  });

  it("refuses, 401 naming why, an ID token whose claims were changed after signing, one for another client, one with no role, one expired", async () => {
    const [header, , signature] = (await idToken(["requester"])).split(".");
    const claims = { sub: "mallory", aud: CLIENT_ID, iss: provider.issuer.url, loopguard_roles: ["operator"] };
    const forged = `${header}.${Buffer.from(JSON.stringify({ ...claims, iat: 1, exp: 4_000_000_000 })).toString("base64url")}.${signature}`;
    expect(await reasonOf(forged)).toMatch(/^bearer token refused: the bearer token's signature does not verify/);
    expect(await reasonOf(await idToken(["requester"], (c) => Object.assign(c, { aud: "another-client" })))).toMatch(
      /^bearer token refused: the bearer token was issued for another service than the client id loopguard-test/,
    );
    expect(await reasonOf(await idToken([]))).toMatch(/^bearer token refused: the ID token names no loopguard role/);
    const expired = await idToken(["requester"], (c) =>
      Object.assign(c, { exp: Math.floor(Date.now() / 1000) - 3600 }),
    );
    expect(await reasonOf(expired)).toMatch(/^bearer token refused: the bearer token expired/);
  });
});

/** The gateway run to its end, as `pnpm -s mcp` would be. */
function exitOf(args: string[], env: Record<string, string>): { status: number | null; stderr: string } {
  return spawnSync(process.execPath, [GATEWAY, ...args], {
    env: { ...process.env, ...suiteEnv(data.dir), ...env },
    input: "",
    encoding: "utf8",
    timeout: 15_000,
  });
}

describe("a command line or settings it cannot use", () => {
  it.each([
    ["--htp", "Unknown option '--htp'"],
    ["--http=yes", "Option '--http' does not take an argument"],
  ])("%s: one line naming the flag, exit 2", (flag, message) => {
    const { status, stderr } = exitOf([flag], {});
    expect(status).toBe(2);
    expect(stderr).toMatch(new RegExp(`^mcp-gateway: ${message}[^\\n]*\\n$`));
  });

  it.each([
    ["ORCHESTRATOR_ADDR", "127.0.0.1:50051 x", "must be host:port or one target like dns:///name:port"],
    ["ORCHESTRATOR_ADDR", "http://127.0.0.1:50051", "must be host:port or one target like dns:///name:port"],
    ["ORCHESTRATOR_ADDR", "127.0.0.1", "must be host:port or one target like dns:///name:port"],
    ["MCP_HTTP_HOST", "127.0.0.1 ", "must be a host name or an IP address, without scheme or port"],
    ["MCP_HTTP_MAX_CONNECTIONS", "0", "must be an integer in 1..100000"],
  ])("%s=%j: one line naming the variable, exit 2, before it serves", (name, value, problem) => {
    const { status, stderr } = exitOf(["--http"], { [name]: value, MCP_HTTP_PORT: "0" });
    expect(status).toBe(2);
    expect(stderr).toBe(`mcp-gateway: configuration error: ${name} ${problem}, got "${value}"\n`);
  });
});

describe("where --http finds the keys it verifies bearers with", () => {
  it.each([
    [
      "no JWKS (no LOOPGUARD_JWKS_FILE, no suite started in LOOPGUARD_DATA_DIR)",
      (empty: string) => ({ LOOPGUARD_DATA_DIR: empty }),
      "no JWKS: set LOOPGUARD_JWKS_FILE or run `pnpm start` once",
    ],
    [
      "an OIDC client id without its issuer",
      () => ({ ORCHESTRATOR_OIDC_AUDIENCE: "loopguard" }),
      "ORCHESTRATOR_OIDC_AUDIENCE is set but ORCHESTRATOR_OIDC_ISSUER is not",
    ],
  ])("%s: one line saying what to set, exit 2, before it serves", (_, env, problem) => {
    const empty = tempDir("mcp-no-keys");
    try {
      const { status, stderr } = exitOf(["--http"], { MCP_HTTP_PORT: "0", ...env(empty.dir) });
      expect(status).toBe(2);
      expect(stderr).toMatch(/^mcp-gateway: configuration error: [^\n]*\n$/);
      expect(stderr).toContain(`configuration error: ${problem}`);
    } finally {
      empty.remove();
    }
  });
});

describe("start-up lines", () => {
  it("over HTTP: names the orchestrator it calls (address), the keys it trusts its callers by (kids), no OIDC", () => {
    expect(startLine(httpLog(), "serving MCP over streamable HTTP")).toMatchObject({
      address: ORCHESTRATOR_ADDR,
      kids: expect.arrayContaining([requesterKey(data.dir).kid]),
      oidc: "off",
    });
  });

  it("on stdio: names the orchestrator it calls (address) and the person it acts as (caller)", async () => {
    ensureLocalKeys(data.dir);
    const stderr = await start([], { LOOPGUARD_DATA_DIR: data.dir }, "serving MCP on stdio");
    expect(startLine(stderr(), "serving MCP on stdio")).toMatchObject({
      address: ORCHESTRATOR_ADDR,
      caller: "requester",
    });
  });
});
