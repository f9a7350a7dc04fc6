// Helpers for tests of tool services: a real server on 127.0.0.1:0 with captured logs, real
// clients with minted tokens, real child processes. Kept out of src/ and out of the package's
// "files", so no service image carries it.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { create, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import {
  audienceOf,
  createLogger,
  createRawClient,
  Effect,
  methodPolicy,
  mintToken,
  newKeyPair,
  type PersonRole,
  personKey,
  publicKeySet,
  requestDigest,
  requiredScopesOf,
  type RawCallOptions,
  type RawClient,
  type ServeOptions,
  servicePolicy,
  servicesOf,
  serveTool,
  signingKeyFromJwk,
  type ToolDefinition,
  type ToolServer,
  toolServicesOf,
  withBinding,
} from "@loopguard/tool-sdk";

export { metricValue } from "@loopguard/tool-sdk";

const orchestratorPair = newKeyPair("test-orchestrator");
const peoplePair = newKeyPair("test-people");
/** The test orchestrator's key (role orchestrator, subject "session:*"): test orchestrators sign their sessions' tool calls with it; boundToken too. */
export { editedContract } from "./edited-contract.js";

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

/** Every scope a tool method requires, from the contracts (the scopes a session may be granted). */
export const TOOL_SCOPES: readonly string[] = requiredScopesOf(toolServicesOf(contractFiles));

/** An operator of the orchestrator API in tests: reads and starts sessions, and may grant them every tool scope. */
export const SESSION_OPERATOR_SCOPES: readonly string[] = [
  "sessions:read",
  "sessions:write",
  ...TOOL_SCOPES.map((s) => `grant:${s}`),
];

export interface TestTokenOptions {
  readonly scopes: readonly string[];
  readonly subject?: string;
  /** The service the token is for; by default the one service the scopes belong to. */
  readonly audience?: string;
  readonly ttlSeconds?: number;
}

/** A person's token signed with the test people's key; its audience is derived from the contracts unless given. */
export function testToken(options: TestTokenOptions): Promise<string> {
  const audience = options.audience ?? audienceOf(options.scopes, servicesOf(contractFiles));
  if (!audience) throw new Error(`scopes ${options.scopes.join(" ")} do not name one service: pass audience`);
  return mintToken(TEST_PEOPLE_KEY, {
    subject: options.subject ?? "test",
    audience,
    scopes: options.scopes,
    ttlSeconds: options.ttlSeconds ?? 600,
  });
}

/**
 * What a test that calls an irreversible method directly sends: the orchestrator's token bound
 * to this exact request (claim `req`), as the orchestrator mints it for one call. `method` is the
 * method's name in the contract, e.g. "Refund".
 */
export function boundToken<S extends DescService>(
  service: S,
  method: string,
  request: MessageInitShape<DescMethod["input"]>,
  subject = "session:test",
): Promise<string> {
  const found = service.methods.find((m) => m.name === method);
  if (!found) throw new Error(`${service.typeName} has no method ${method}`);
  const scope = methodPolicy(found).requiredScope;
  return mintToken(TEST_ORCHESTRATOR_KEY, {
    subject,
    audience: servicePolicy(service).toolName,
    scopes: scope ? [scope] : [],
    requestDigest: requestDigest(found.input, create(found.input, request)),
    ttlSeconds: 600,
  });
}

/**
 * `client` as the orchestrator calls: each call of an irreversible method carries its own token
 * bound to that request (boundToken); the other methods keep the client's token. For tests that
 * call an irreversible method directly.
 */
export function withBoundTokens<S extends DescService>(service: S, client: RawClient<S>): RawClient<S> {
  const out: Record<string, unknown> = { ...client };
  for (const method of service.methods) {
    if (methodPolicy(method).effect !== Effect.IRREVERSIBLE_EXTERNAL) continue;
    const send = (client as Record<string, unknown>)[method.localName] as (
      request: unknown,
      options?: RawCallOptions,
    ) => Promise<unknown>;
    out[method.localName] = async (request: MessageInitShape<DescMethod["input"]>, options: RawCallOptions = {}) =>
      send(request, { ...options, token: await boundToken(service, method.name, request) });
  }
  return out as RawClient<S>;
}

/** A token of one of the local people whose keys `pnpm start` made under `dataDir`, signed as the CLI signs (subject: the key's binding). */
export function localPersonToken(
  dataDir: string,
  person: PersonRole,
  audience: string,
  scopes: readonly string[],
): Promise<string> {
  const { key, binding } = personKey({ LOOPGUARD_DATA_DIR: dataDir }, person);
  return mintToken(key, { subject: binding.subject, audience, scopes, ttlSeconds: 3600 });
}

export interface TestTool<S extends DescService> {
  readonly server: ToolServer;
  readonly address: string;
  /** Every log line the server wrote, parsed. */
  readonly logs: Record<string, unknown>[];
  /** A client whose token carries exactly these scopes. */
  client(scopes: readonly string[], subject?: string): Promise<RawClient<S>>;
  close(): Promise<void>;
}

export async function startTestTool<S extends DescService>(
  definition: ToolDefinition<S>,
  options: Partial<Omit<ServeOptions, "logger" | "publicKeys">> = {},
): Promise<TestTool<S>> {
  const logs: Record<string, unknown>[] = [];
  const logger = createLogger({
    service: "test",
    level: "debug",
    write: (line) => logs.push(JSON.parse(line) as Record<string, unknown>),
  });
  const server = await serveTool(definition, {
    host: "127.0.0.1",
    port: 0,
    metricsPort: 0,
    maxConcurrent: 64,
    shutdownGraceMs: 5000,
    ...options,
    publicKeys: TEST_PUBLIC_KEYS,
    logger,
  });
  const clients: RawClient<S>[] = [];
  return {
    server,
    address: server.address,
    logs,
    async client(scopes, subject = "test") {
      const token = await testToken({ subject, scopes, audience: servicePolicy(definition.service).toolName });
      const client = createRawClient(definition.service, server.address, { token });
      clients.push(client);
      return client;
    },
    async close() {
      for (const c of clients) c.close();
      await server.shutdown();
    },
  };
}

export { checkHealth, type HealthStatus } from "@loopguard/tool-sdk";

export interface ToolProcess {
  readonly child: ChildProcess;
  /** host:port the process serves gRPC on, read from its "serving" log line. */
  readonly address: string;
  readonly metricsPort: number;
  readonly lines: Record<string, unknown>[];
  /** Resolves with the exit code (or signal name) once the process has ended. */
  readonly exited: Promise<number | string>;
}

/**
 * Starts `node <entry>` as a real child process and waits for its "serving" line. Pass port 0
 * variables in `env` to let the OS choose ports.
 */
export function spawnTool(entry: string, env: Record<string, string>, timeoutMs = 15_000): Promise<ToolProcess> {
  const child = spawn(process.execPath, [entry], {
    env: { ...process.env, ...TEST_AUTH_ENV, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal ?? -1)),
  );
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${entry} did not report serving within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${entry} exited (${code}) before serving; stderr: ${stderr}`));
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      lines.push(record);
      if (record.msg === "serving") {
        clearTimeout(timer);
        resolve({ child, address: String(record.address), metricsPort: Number(record.metrics_port), lines, exited });
      }
    });
  });
}
