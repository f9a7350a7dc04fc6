// The MCP server over the registry's tools; one per connection (stdio) or per request (stateless
// HTTP). `tokenFor` says who the caller is to the orchestrator: the local requester's minted token
// on stdio, the client's own bearer on HTTP.
import { singleCallTask } from "@loopguard/orchestrator/single-call";
import { taskProblem } from "@loopguard/orchestrator/start-request";
import type { RegisteredTool } from "@loopguard/orchestrator/tool-registry";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  type CallToolRequest,
  CallToolRequestSchema,
  ErrorCode,
  type JSONRPCRequest,
  ListToolsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";
import { echoedName } from "@loopguard/tool-sdk";
import { ROOT_CONTEXT } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { idempotencyKeyOf } from "./idempotency-key.js";
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

/**
 * A tools/call request's params, checked here rather than by the SDK: its own check of
 * CallToolRequestSchema answers -32603 with the validator's whole report. A mistake is
 * InvalidParams (-32602) in one line naming the field.
 */
function callParams(request: JSONRPCRequest): CallToolRequest["params"] {
  const params = request.params as Record<string, unknown> | undefined;
  const isObject = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObject(params)) throw new McpError(ErrorCode.InvalidParams, "params must be an object");
  if (typeof params?.name !== "string") throw new McpError(ErrorCode.InvalidParams, "name must be a string");
  if (params.arguments !== undefined && !isObject(params.arguments))
    throw new McpError(ErrorCode.InvalidParams, "arguments must be an object");
  const parsed = CallToolRequestSchema.safeParse(request);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path.slice(1).join(".") || "params";
    throw new McpError(ErrorCode.InvalidParams, `${field}: ${(issue?.message ?? "invalid").split("\n")[0]}`);
  }
  return parsed.data.params;
}

export function createGatewayServer(deps: GatewayDeps): Server {
  const byName = new Map(deps.tools.map((t) => [t.name, t]));
  const listed = deps.tools.map(mcpTool);
  const server = new Server({ name: "loopguard", version: "0.1.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  // tools/call through the SDK's fallback handler, the one way to see its params before the SDK's own check.
  server.fallbackRequestHandler = async (request, extra) => {
    if (request.method !== CallToolRequestSchema.shape.method.value)
      throw new McpError(ErrorCode.MethodNotFound, "Method not found");
    const params = callParams(request);
    const tool = byName.get(params.name);
    if (!tool)
      throw new McpError(ErrorCode.InvalidParams, `unknown tool ${echoedName(params.name)}; tools/list names them`);
    // The session's task is checked here as the orchestrator checks it, before protobuf's encoder
    // recurses through arguments nested too deep for its stack.
    const problem = taskProblem(singleCallTask(tool, (params.arguments ?? {}) as never));
    if (problem) throw new McpError(ErrorCode.InvalidParams, `arguments: ${problem}`);
    const meta = (params._meta ?? {}) as Record<string, unknown>;
    const idempotencyKey = idempotencyKeyOf(meta);
    // A client that traces puts its W3C traceparent in the request's _meta; the session's calls continue that trace.
    const parent = propagator.extract(ROOT_CONTEXT, meta, metaGetter);
    // The SDK aborts `extra.signal` when the client's connection closes: the session is then no longer followed.
    return callAsSession(deps, {
      tool,
      args: params.arguments ?? {},
      idempotencyKey,
      tokenOf: () => deps.tokenFor(tool),
      parent,
      signal: extra.signal,
    });
  };
  return server;
}
