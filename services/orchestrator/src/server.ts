// Builds the orchestrator from its config: store, tool clients, policies, the Orchestrator, and
// the ToolDefinition that serveTool serves. main.ts wires; tests build in-process.
import { randomBytes } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  ClientMetrics,
  type Logger,
  ServerMetrics,
  servicePolicy,
  type ToolClient,
  type ToolDefinition,
  toolClient,
} from "@loopguard/tool-sdk";
import { parseStoreUrl } from "@loopguard/sql-store";
import { createOrchestratorHandlers } from "./api/api-handlers.js";
import type { OrchestratorConfig } from "./config.js";
import type { LogTail } from "./api/log-tail.js";
import { openSessionStore, storeClock } from "./store/open-store.js";
import { clockStepNotice } from "./store/slewing-clock.js";
import { type PriceTable, priceOf, priceTable } from "./policies/model-prices.js";
import { tokenCounter } from "./policies/model-tokens.js";
import { Orchestrator } from "./session/orchestrator.js";
import { ScriptedPolicy } from "./policies/scripted-policy.js";
import { SingleCallPolicy } from "./policies/single-call-policy.js";
import type { Policy } from "./policies/policy.js";
import { registerPatrolMetrics } from "./governance/patrol-runs.js";
import { SessionMetrics } from "./governance/session-metrics.js";
import { storePoolMetrics } from "./governance/store-metrics.js";
import { SessionSampling } from "./session/sampling.js";
import { SideEffectRules } from "./guard/side-effects.js";
import { StepRetention } from "./governance/step-retention.js";
import { TimeSeries } from "./api/time-series.js";
import { DEFAULT_TOOL_SERVICES, ToolRegistry } from "./tool-registry.js";
import { ToolTokens } from "./guard/tool-tokens.js";
import { TraceSink } from "./governance/trace-sink.js";

export interface BuiltOrchestrator {
  readonly definition: ToolDefinition<typeof OrchestratorService>;
  readonly orchestrator: Orchestrator;
  readonly metrics: ServerMetrics;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  /** Loads the model's tokenizer now rather than in the first session that counts a prompt. */
  readonly warmUp: () => void;
}

export interface BuildOptions {
  /** The tools' contracts (default: the suite's three). */
  readonly services?: readonly DescService[];
  /** This process's recent log lines, shown in GetSessionDetail. */
  readonly logTail?: LogTail;
  /** Policies in place of the built-in ones of the same name (tests drive "openai" sessions with a model of their own). */
  readonly policies?: readonly Policy[];
  /** This machine's clock, epoch ms (default Date.now); tests skew it to play a replica whose clock is off. */
  readonly now?: () => number;
}

export async function build(
  config: OrchestratorConfig,
  log: Logger,
  { services = DEFAULT_TOOL_SERVICES, logTail, policies: extra = [], now: base }: BuildOptions = {},
): Promise<BuiltOrchestrator> {
  const metrics = new ServerMetrics("orchestrator");
  const sessionMetrics = new SessionMetrics(metrics.registry);
  const pool = config.storePoolSize === undefined ? {} : { maxConnections: config.storePoolSize };
  // Times other replicas compare (approval expiries, wall-clock deadlines, wake times) are on the one shared clock.
  const clock = storeClock(config.storeUrl, base, {
    onSkew: (offsetMs) =>
      log.warn(
        `this machine's clock is off the database's by ${offsetMs} ms; shared times are corrected by the offset`,
      ),
    onStep: (stepMs, slewed) => log.warn(clockStepNotice(stepMs, slewed)),
  });
  const now = clock.now;
  const store = await openSessionStore(config.storeUrl, {
    ...clock.options,
    ...config.storeTimeouts,
    ...pool,
    migrate: config.migrateOnStart,
    onUnavailable: (error) => sessionMetrics.storeErrors.inc({ operation: error.operation }),
    // Only a PostgreSQL store has a pool and round trips to count.
    ...(parseStoreUrl(config.storeUrl, "ORCHESTRATOR_STORE").kind === "postgres"
      ? { poolObserver: storePoolMetrics(metrics.registry) }
      : {}),
  });
  sessionMetrics.observe(store, now);
  registerPatrolMetrics(metrics.registry, store);
  const clientMetrics = new ClientMetrics(metrics.registry);
  const registry = new ToolRegistry(services);
  const clients = new Map<string, ToolClient<DescService>>();
  for (const service of services) {
    // A driven session makes one call at a time: with a queue as long as the sessions driven at
    // once, a burst waits behind the calls in flight instead of getting a healthy tool's fallback.
    const client = toolClient(service, {
      target: config.toolTargets[servicePolicy(service).toolName] ?? [],
      metrics: clientMetrics,
      bulkhead: { maxQueue: config.maxActiveSessions },
      hedge: { enabled: config.hedgedReads },
      maxAnswerBytes: config.maxToolAnswerBytes,
    });
    clients.set(client.tool, client as ToolClient<DescService>);
  }
  const policies = new Map<string, Policy>([
    ["scripted", new ScriptedPolicy()],
    ["single-call", new SingleCallPolicy()],
  ]);
  const prices = priceTable(config.model.prices);
  if (config.openai) policies.set("openai", await openAiPolicy(config.openai, config.model.timeoutMs, prices));
  for (const policy of extra) policies.set(policy.name, policy);
  const counter = tokenCounter(config.model.encoding);
  const rules = new SideEffectRules(registry);
  sessionMetrics.knowTools(
    registry.list().map((t) => t.name),
    (name) => rules.isIrreversible(name),
  );
  const orchestrator = new Orchestrator({
    store,
    registry,
    clients,
    policies,
    traces: new TraceSink(store, config.traceDir, {
      retention: config.traceRetention,
      events: {
        failed: (error, first) => {
          sessionMetrics.traceFileErrors.inc();
          if (first)
            log.warn("step trace file failed; steps go to the store only until a new file opens", {
              reason: String(error),
            });
        },
        recovered: () => log.info("step trace file written again"),
      },
    }),
    tokens: new ToolTokens(
      config.signingKey,
      config.callSecrets,
      (outcome) =>
        "error" in outcome
          ? log.error("call secrets not reloaded", { reason: outcome.error })
          : log.warn("call secrets reloaded", { kids: outcome.kids }),
      (tool, refused, instead) =>
        log.warn(`${tool} does not hold call key ${refused} yet; its calls are made with ${instead} for a minute`, {
          tool,
          refused_kid: refused,
          kid: instead,
        }),
    ),
    rules,
    approvals: config.approvals,
    context: config.context,
    tokenCounter: counter,
    prices,
    // One owner per process start: a replica restarted under the same id (a container's pid 1, a
    // pod's name) takes its sessions over, so a session that kills every process counts takeovers.
    owner: `${config.instanceId}/${randomBytes(4).toString("hex")}`,
    runId: `run_${randomBytes(6).toString("hex")}`,
    now,
    log,
    metrics: sessionMetrics,
    leaseTtlMs: config.leaseTtlMs,
    maxActiveSessions: config.maxActiveSessions,
    maxSessionsPerCaller: config.maxSessionsPerCaller,
    // A backstop only: sessions let go are claimed on their event; this finds expired leases.
    claimIntervalMs: Math.min(1000, Math.floor(config.leaseTtlMs / 2)),
    approvalSweepMs: config.approvalSweepMs,
    wakePerSecond: config.wakePerSecond,
    maxTakeovers: config.maxTakeovers,
    sampling: new SessionSampling(config.ops.traceSampleRatio, registry),
  });
  const retention = new StepRetention({
    store,
    days: config.ops.stepRetentionDays,
    intervalMs: config.ops.stepRetentionIntervalMs,
    batch: 500,
    registry: metrics.registry,
    log,
    now,
  });
  retention.start();
  const series = new TimeSeries({
    store,
    registry: metrics.registry,
    clients,
    intervalMs: config.ops.seriesIntervalMs,
    now,
  });
  series.start();
  return {
    orchestrator,
    metrics,
    clients,
    // The encoding takes a second or two of CPU to load (model-tokens.ts): once serving, so that it
    // does not delay the startup probe, and before the first claim (main.ts).
    warmUp: () => void counter.text("warm up"),
    definition: {
      service: OrchestratorService,
      handlers: createOrchestratorHandlers({ orchestrator, now, registry: metrics.registry, clients, logTail, series }),
      close: async () => {
        await retention.stop();
        await series.stop();
        await orchestrator.stop();
        for (const client of clients.values()) client.close();
        await store.close();
      },
    },
  };
}

/**
 * The configured model endpoint's policy. Its `openai` SDK is imported here, and only when a model is configured:
 * the import costs a process start about 140 ms of CPU.
 */
async function openAiPolicy(
  { baseUrl, model, apiKey }: NonNullable<OrchestratorConfig["openai"]>,
  timeoutMs: number,
  prices: PriceTable,
): Promise<Policy> {
  const { createOpenAiPolicy } = await import("./policies/openai-policy.js");
  const price = priceOf(prices, model);
  return createOpenAiPolicy({
    baseUrl,
    model,
    timeoutMs,
    ...(apiKey ? { apiKey } : {}),
    ...(price ? { price } : {}),
  });
}
