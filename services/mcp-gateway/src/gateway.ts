// The MCP server over the registry's tools; one per connection (stdio) or per request (stateless
// HTTP). `tokenFor` says who the caller is to the orchestrator: the local requester's minted token
// on stdio, the client's own bearer on HTTP.
import type { RegisteredTool } from "@loopguard/orchestrator/tool-registry";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";
import { ROOT_CONTEXT } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { type CallDeps, callAsSession } from "./session-call.js";
import { mcpTool } from "./tools.js";

export interface GatewayDeps extends CallDeps {
  readonly tools: readonly RegisteredTool[];
  /** The orchestrator token for a call of `tool`. */
  tokenFor(tool: RegisteredTool): Promise<string>;
}

const propagator = new W3CTraceContextPropagator();
const metaGetter = {
  keys: (carrier: Record<string, unknown>) => Object.keys(carrier),
  get: (carrier: Record<string, unknown>, key: string) => (typeof carrier[key] === "string" ? carrier[key] : undefined),
};

export function createGatewayServer(deps: GatewayDeps): Server {
  const byName = new Map(deps.tools.map((t) => [t.name, t]));
  const listed = deps.tools.map(mcpTool);
  const server = new Server({ name: "loopguard", version: "0.1.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = byName.get(request.params.name);
    if (!tool)
      throw new McpError(ErrorCode.InvalidParams, `unknown tool "${request.params.name}"; tools/list names them`);
    // A client that traces puts its W3C traceparent in the request's _meta; the session's calls continue that trace.
    const parent = propagator.extract(
      ROOT_CONTEXT,
      (request.params._meta ?? {}) as Record<string, unknown>,
      metaGetter,
    );
    // The SDK aborts `extra.signal` when the client's connection closes: the session is then no longer followed.
    return callAsSession(deps, tool, request.params.arguments ?? {}, await deps.tokenFor(tool), parent, extra.signal);
  });
  return server;
}
