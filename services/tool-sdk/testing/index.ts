// Helpers for tests of tool services: a real server on 127.0.0.1:0 with captured logs, real
// clients with minted tokens, the workspace's tools as real child processes. Kept out of src/ and out of the package's
// "files", so no service image carries it.
import { create, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import {
  audienceOf,
  createLogger,
  createRawClient,
  Effect,
  methodPolicy,
  mintToken,
  personKey,
  requestDigest,
  requiredScopesOf,
  type RawCallOptions,
  type RawClient,
  type ServeOptions,
  servicePolicy,
  servicesOf,
  serveTool,
  type ToolDefinition,
  type ToolServer,
  TokenVerifier,
  toolServicesOf,
} from "@loopguard/tool-sdk";
import { TEST_ORCHESTRATOR_KEY, TEST_PUBLIC_KEYS, testCallKeys, testPersonKey } from "./keys.js";

export { metricValue } from "@loopguard/tool-sdk";
export { editedContract } from "./edited-contract.js";

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

/** What a test service verifies callers of `audience` with: the test keys, as serveTool is given them in tests. */
export function testVerifier(audience: string): TokenVerifier {
  return new TokenVerifier(TEST_PUBLIC_KEYS, audience);
}

/**
 * A person's token signed with the key of the test person it names (one of TEST_PEOPLE; "test" by
 * default); its audience is derived from the contracts unless given.
 */
export function testToken(options: TestTokenOptions): Promise<string> {
  const audience = options.audience ?? audienceOf(options.scopes, servicesOf(contractFiles));
  if (!audience) throw new Error(`scopes ${options.scopes.join(" ")} do not name one service: pass audience`);
  const subject = options.subject ?? "test";
  return mintToken(testPersonKey(subject), {
    subject,
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

/**
 * A token of one of the local people whose keys `pnpm start` (or `pnpm keys new`) made under `dataDir`, signed as the
 * CLI signs (subject: the key's binding).
 */
export function localPersonToken(
  dataDir: string,
  person: string,
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
    callKeys: testCallKeys(servicePolicy(definition.service).toolName),
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

/** A kb-search hit: the SDK's own tests serve KbSearchService as their sample contract. */
export const SAMPLE_HIT = {
  docId: "refund-policy",
  version: 1,
  title: "Refund policy",
  snippet: "…",
  score: 1.5,
  category: "policy",
};

export {
  TEST_AUTH_ENV,
  TEST_CALL_SECRETS,
  TEST_CALL_SECRETS_FILE,
  TEST_ORCHESTRATOR_KEY,
  TEST_PEOPLE,
  TEST_PEOPLE_KEY,
  TEST_PUBLIC_KEYS,
  testCallKeys,
  testCallKeysFile,
  testOrchestratorEnv,
  testOrchestratorKeyFile,
  testPersonKey,
} from "./keys.js";
export {
  spawnTool,
  type StartAllOptions,
  startAllTools,
  startTool,
  startTools,
  TOOLS,
  type ToolName,
  toolAddressEnv,
  type WorkspaceTools,
  workspaceService,
} from "./workspace.js";
