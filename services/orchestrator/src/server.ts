// Builds the orchestrator from its config: store, tool clients, policies, the Orchestrator, and
// the ToolDefinition that serveTool serves. main.ts wires; tests build in-process.
import { randomBytes } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ClientMetrics, type Logger, mintToken, ServerMetrics, servicePolicy, type ToolClient, type ToolDefinition, toolClient } from "@loopguard/tool-sdk";
import { createOrchestratorHandlers } from "./api-handlers.js";
import type { OrchestratorConfig } from "./config.js";
import { openSessionStore } from "./open-store.js";
import { Orchestrator } from "./orchestrator.js";
import { createOpenAiPolicy } from "./policies/openai-policy.js";
import { ScriptedPolicy } from "./policies/scripted-policy.js";
import type { Policy } from "./policy.js";
import { SessionMetrics } from "./session-metrics.js";
import { DEFAULT_TOOL_SERVICES, ToolRegistry } from "./tool-registry.js";
import { TraceSink } from "./trace-sink.js";

export interface BuiltOrchestrator {
  readonly definition: ToolDefinition<typeof OrchestratorService>;
  readonly orchestrator: Orchestrator;
  readonly metrics: ServerMetrics;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
}

const TOKEN_TTL_SECONDS = 600;

export async function build(config: OrchestratorConfig, log: Logger, services: readonly DescService[] = DEFAULT_TOOL_SERVICES): Promise<BuiltOrchestrator> {
  const store = await openSessionStore(config.storeUrl);
  const metrics = new ServerMetrics("orchestrator");
  const clientMetrics = new ClientMetrics(metrics.registry);
  const registry = new ToolRegistry(services);
  const clients = new Map<string, ToolClient<DescService>>();
  for (const service of services) {
    const client = toolClient(service, { target: config.toolTargets[servicePolicy(service).toolName] ?? [], metrics: clientMetrics });
    clients.set(client.tool, client as ToolClient<DescService>);
  }
  const policies = new Map<string, Policy>([["scripted", new ScriptedPolicy()]]);
  if (config.openai) policies.set("openai", createOpenAiPolicy({ baseUrl: config.openai.baseUrl, model: config.openai.model, ...(config.openai.apiKey ? { apiKey: config.openai.apiKey } : {}) }));
  // Tool calls carry a short-lived token with exactly the session's granted scopes, so every
  // tool enforces least privilege itself. Sessions granted the same scopes share one token
  // (minted per scope set, renewed a minute before it expires): a token per session would cost a
  // signature here and a verification in every tool for each session, and prove nothing more —
  // the session is named by the call's trace context, not by its credential.
  const tokens = new Map<string, { token: string; expiresAt: number }>();
  const tokenFor = async (scopes: readonly string[]) => {
    const key = [...scopes].sort().join(" ");
    const cached = tokens.get(key);
    if (cached && cached.expiresAt > Date.now() + 60_000) return cached.token;
    const token = await mintToken(config.authSecret, { subject: `orchestrator:${config.instanceId}`, scopes, ttlSeconds: TOKEN_TTL_SECONDS });
    if (tokens.size > 1_000) tokens.clear();
    tokens.set(key, { token, expiresAt: Date.now() + TOKEN_TTL_SECONDS * 1000 });
    return token;
  };
  const orchestrator = new Orchestrator({
    store,
    registry,
    clients,
    policies,
    traces: new TraceSink(store, config.traceDir),
    tokenFor,
    approvals: config.approvals,
    context: config.context,
    owner: config.instanceId,
    runId: `run_${randomBytes(6).toString("hex")}`,
    now: Date.now,
    log,
    metrics: new SessionMetrics(metrics.registry, store),
    leaseTtlMs: config.leaseTtlMs,
    maxActiveSessions: config.maxActiveSessions,
    claimIntervalMs: 250,
  });
  return {
    orchestrator,
    metrics,
    clients,
    definition: {
      service: OrchestratorService,
      handlers: createOrchestratorHandlers(orchestrator),
      close: async () => {
        await orchestrator.stop();
        for (const client of clients.values()) client.close();
        await store.close();
      },
    },
  };
}
