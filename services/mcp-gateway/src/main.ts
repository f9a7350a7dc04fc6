// `pnpm -s mcp`: the registry's tools over MCP on stdio, acting as the local person (LOOPGUARD_AS,
// default requester); `pnpm -s mcp --http`: over streamable HTTP, acting as each request's bearer.
// Stdout carries nothing but JSON-RPC on stdio: logs and notices go to stderr.
import { parseArgs } from "node:util";
import { singleCallScopes } from "@loopguard/orchestrator/single-call";
import { type RegisteredTool, ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  callerVerifier,
  ConfigError,
  checkHealth,
  createLogger,
  createRawClient,
  mintToken,
  type PersonKey,
  personKey,
  startTelemetry,
} from "@loopguard/tool-sdk";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { bulkhead } from "cockatiel";
import { loadCallerTrust, loadGatewayConfig } from "./config.js";
import { createGatewayServer } from "./gateway.js";
import { MCP_PATH, serveMcpHttp } from "./http.js";

function fail(message: string): never {
  process.stderr.write(`mcp-gateway: ${message}\n`);
  process.exit(2);
}

let values: { http?: boolean };
try {
  ({ values } = parseArgs({ options: { http: { type: "boolean" } } }));
} catch (error) {
  // parseArgs names the unknown option or the value given to a flag (--htp, --http=yes).
  fail((error as Error).message);
}
const stdio = !values.http;
// A console exporter writes spans to stdout, which is the JSON-RPC channel on stdio.
if (stdio && process.env.OTEL_TRACES_EXPORTER === "console") {
  process.stderr.write(
    "mcp-gateway: OTEL_TRACES_EXPORTER=console would write to stdout, the JSON-RPC channel; not exporting spans\n",
  );
  process.env.OTEL_TRACES_EXPORTER = "none";
}
startTelemetry("mcp-gateway");

/** What `load` reads from the environment; a setting it cannot use ends the gateway in one line, exit 2. */
function configured<T>(load: () => T): T {
  try {
    return load();
  } catch (error) {
    if (error instanceof ConfigError) fail(`configuration error: ${error.message}`);
    throw error;
  }
}

const config = configured(loadGatewayConfig);
const log = createLogger({
  service: "mcp-gateway",
  level: config.logLevel,
  write: (line) => process.stderr.write(`${line}\n`),
});
const api = createRawClient(OrchestratorService, config.orchestratorAddr);
const registry = new ToolRegistry();
const tools = registry.list();
const scopesOf = singleCallScopes(registry);
const deps = {
  api,
  tools,
  scopesOf,
  orchestratorAddr: config.orchestratorAddr,
  waitMs: config.callWaitMs,
  calls: bulkhead(config.maxCalls),
  log,
};

// The gateway needs a running suite; say so at once rather than at the first call.
void checkHealth(config.orchestratorAddr).then(
  (health) =>
    health !== "SERVING" &&
    process.stderr.write(`mcp-gateway: the orchestrator at ${config.orchestratorAddr} is ${health}\n`),
  () =>
    process.stderr.write(
      `mcp-gateway: cannot reach the orchestrator at ${config.orchestratorAddr}; start the suite with \`pnpm start\` (or set ORCHESTRATOR_ADDR)\n`,
    ),
);

if (stdio) {
  let person: PersonKey;
  try {
    person = personKey(process.env);
  } catch (error) {
    fail(error instanceof ConfigError ? error.message : `cannot read the signing key: ${(error as Error).message}`);
  }
  // Only the grants the person's key holds: the orchestrator names any other (SCOPE_NOT_GRANTABLE).
  const tokenFor = (tool: RegisteredTool) => {
    const grants = scopesOf(tool)
      .map((s) => `grant:${s}`)
      .filter((g) => person.scopeBeyond([g]) === undefined);
    return mintToken(person.key, {
      subject: person.binding.subject,
      audience: "orchestrator",
      scopes: ["sessions:read", "sessions:write", ...grants],
      ttlSeconds: 300,
    });
  };
  const server = createGatewayServer({ ...deps, tokenFor });
  await server.connect(new StdioServerTransport());
  process.stdin.once("end", () => process.exit(0));
  // Fields the logger's allow-list writes: address is the orchestrator called, caller the person acting.
  log.info("serving MCP on stdio", {
    caller: person.binding.subject,
    address: config.orchestratorAddr,
    tools: tools.length,
  });
} else {
  const trust = configured(loadCallerTrust);
  // Refused here rather than by the orchestrator: a forged bearer gets no body read, no call made.
  const verifier = callerVerifier("orchestrator", trust, log);
  const http = await serveMcpHttp(
    { ...deps, verifier },
    config.httpHost,
    config.httpPort,
    config.httpMaxConnections,
  ).catch((error: unknown) =>
    fail(`cannot listen on ${config.httpHost}:${config.httpPort}: ${(error as Error).message}`),
  );
  log.info("serving MCP over streamable HTTP", {
    url: `http://${http.address}${MCP_PATH}`,
    address: config.orchestratorAddr,
    tools: tools.length,
    kids: trust.publicKeys.keys.map((k) => k.kid),
    oidc: trust.oidc?.issuer ?? "off",
  });
  for (const signal of ["SIGTERM", "SIGINT"] as const)
    process.once(signal, () => void http.close().then(() => process.exit(0)));
}
