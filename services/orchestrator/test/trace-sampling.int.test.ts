// Head sampling of session traces at ratio 0.1, as the prod overlay sets it: the orchestrator in
// process with the SDK's own parent-based ratio sampler and an in-memory exporter, the tool services
// as real processes exporting OTLP/JSON to a receiver this test runs on loopback.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { context, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  ParentBasedSampler,
  SamplingDecision,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionSampling } from "../src/session/sampling.js";
import { traceIdOf } from "../src/session/trace-id.js";
import { ToolRegistry } from "../src/tool-registry.js";
import {
  decisionOn,
  HIGH_RISK_CUSTOMER,
  startOrchestrator,
  startRefund,
  startTools,
  type TestOrchestrator,
  type Tools,
  waitForSession,
} from "./harness.js";

const RATIO = 0.1;
const ORDINARY = 40;
const FAILING = 4;

const spans = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(
  new BasicTracerProvider({
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(RATIO) }),
    spanProcessors: [new SimpleSpanProcessor(spans)],
  }),
);

/** Trace ids of the spans the tool processes exported, by span name. */
const toolSpans: { name: string; traceId: string }[] = [];
let receiver: Server;
let tools: Tools;
let orch: TestOrchestrator;

const keptByRatio = (sessionId: string) =>
  new TraceIdRatioBasedSampler(RATIO).shouldSample(ROOT_CONTEXT, traceIdOf(sessionId)).decision ===
  SamplingDecision.RECORD_AND_SAMPLED;
const agentSpans = (sessionId: string) =>
  spans
    .getFinishedSpans()
    .filter((s) => s.name === "invoke_agent" && s.attributes["loopguard.session_id"] === sessionId);

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => {
      body += chunk.toString();
    });
    req.on("end", () => {
      const json = JSON.parse(body) as {
        resourceSpans: { scopeSpans: { spans: { name: string; traceId: string }[] }[] }[];
      };
      for (const r of json.resourceSpans)
        for (const s of r.scopeSpans)
          for (const span of s.spans) toolSpans.push({ name: span.name, traceId: span.traceId });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  // The tools keep the SDK's default sampler (parent-based): their spans follow the orchestrator's flag.
  tools = await startTools({
    inTurn: true,
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_BSP_SCHEDULE_DELAY: "100",
    },
  });
  orch = await startOrchestrator(tools, {
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: String(RATIO),
  });
}, 120_000);
afterAll(async () => {
  await orch?.close();
  await tools?.stop();
  receiver?.close();
});

describe("session traces at ratio 0.1", () => {
  it("keeps about a tenth of ordinary sessions' traces, decided by the session's trace id alone", () => {
    const sampling = new SessionSampling(RATIO, new ToolRegistry());
    let kept = 0;
    for (let i = 0; i < 20_000; i++) if (sampling.keep({ scopes: ["kb:read"] }, traceIdOf(`ses_${i}`))) kept += 1;
    expect(kept / 20_000).toBeGreaterThan(0.09);
    expect(kept / 20_000).toBeLessThan(0.11);
  });

  it("keeps an ordinary session's trace exactly when its root's ratio says so, and the tools' spans follow it", async () => {
    const ids: string[] = [];
    for (let i = 0; i < ORDINARY; i++) {
      const { session } = await orch.api.startSession({
        goal: `What is the refund policy? (${i})`,
        scopes: ["kb:read"],
        policy: "scripted",
      });
      ids.push(session!.sessionId);
    }
    for (const id of ids) expect(SessionState[(await waitForSession(orch.api, id)).state]).toBe("DONE");
    // Tool processes export in batches every 100 ms.
    await sleep(1500);
    const expected = ids.filter(keptByRatio);
    const kept = ids.filter((id) => agentSpans(id).length > 0);
    expect(kept).toEqual(expected);
    // A caller that started every session in a sampled trace of its own did not make them kept.
    expect(kept.length).toBeLessThan(ORDINARY / 2);
    for (const id of ids) {
      const traceId = traceIdOf(id);
      const inTools = toolSpans.filter((s) => s.traceId === traceId);
      expect({ id, kept: inTools.length > 0 }).toEqual({ id, kept: keptByRatio(id) });
      const steps = await orch.orchestrator.store.steps(id);
      expect(steps.every((s) => String(s.payload.traceparent).endsWith(keptByRatio(id) ? "-01" : "-00"))).toBe(true);
    }
    // The caller's span is linked from the session's root, so the two traces can be joined.
    const linked = expected.flatMap((id) => agentSpans(id)).filter((s) => s.links.length === 1);
    expect(linked.length).toBe(expected.length);
  }, 60_000);

  it("keeps every failed session's trace, recorded from its steps when head sampling dropped it", async () => {
    const ids: string[] = [];
    for (let i = 0; ids.filter((id) => !keptByRatio(id)).length < FAILING; i++) {
      const { session } = await orch.api.startSession({
        goal: `What is the refund policy? (failing ${i})`,
        scopes: ["kb:read"],
        policy: "scripted",
        budget: { maxSteps: 1 },
      });
      ids.push(session!.sessionId);
    }
    for (const id of ids) {
      const ended = await waitForSession(orch.api, id);
      expect(SessionState[ended.state]).toBe("FAILED");
      const agent = agentSpans(id);
      expect(agent.length).toBeGreaterThan(0);
      if (!keptByRatio(id)) {
        expect(agent.map((s) => s.attributes["loopguard.kept_by"])).toEqual(["error"]);
        const steps = spans
          .getFinishedSpans()
          .filter((s) => s.spanContext().traceId === traceIdOf(id) && s.name.startsWith("step "));
        expect(steps.length).toBe((await orch.orchestrator.store.steps(id)).length);
        expect(steps.length).toBeGreaterThan(0);
      }
    }
  }, 30_000);

  it("keeps every session that may wait for an approval, whatever the ratio says", async () => {
    const ids: string[] = [];
    for (let i = 0; ids.filter((id) => !keptByRatio(id)).length < 2; i++)
      ids.push(await startRefund(orch.api, "ord_DEMO00000008", 1000 + i, HIGH_RISK_CUSTOMER));
    for (const id of ids) {
      await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
      expect(agentSpans(id).map((s) => s.attributes["loopguard.kept_by"])).toContain("approval");
      await orch.api.cancelSession({ sessionId: id, reason: "test over" });
    }
    await sleep(1000);
    for (const id of ids) expect(toolSpans.some((s) => s.traceId === traceIdOf(id))).toBe(true);
  }, 30_000);

  it("puts the host's live reads before a refund, and the re-read an approval makes, in the session's trace", async () => {
    const reads = (id: string) =>
      spans
        .getFinishedSpans()
        .filter((s) => /^loopguard\.(billing|risk)\.v1\.\w+Service\/Get/.test(s.name))
        .map((s) => ({ name: s.name, inSession: s.spanContext().traceId === traceIdOf(id) }));
    spans.reset();
    const id = await startRefund(orch.api, "ord_DEMO00000008", 1500, HIGH_RISK_CUSTOMER);
    const waiting = await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
    const before = reads(id);
    expect(before.map((r) => r.name)).toContain("loopguard.billing.v1.BillingService/GetOrder");
    expect(before.filter((r) => !r.inSession)).toEqual([]);
    spans.reset();
    await orch.approver.resolveApproval(decisionOn(id, waiting.pendingApproval!, true, "checked"));
    await waitForSession(orch.api, id);
    const after = reads(id);
    expect(after.map((r) => r.name)).toContain("loopguard.billing.v1.BillingService/GetOrder");
    expect(after.filter((r) => !r.inSession)).toEqual([]);
  }, 30_000);
});
