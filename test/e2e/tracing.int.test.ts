// One trace across every hop: the suite as real processes exporting OTLP (http/json) to a
// receiver started by this test; a refund session yields one trace with spans from all four
// services, correctly parented, whose id is the one in the session's JSONL trace. The same
// receiver takes the logs pipeline: the session's step records, redacted, as log records.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { kill, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import {
  SESSION_OPERATOR_SCOPES,
  spawnTool,
  startAllTools,
  testOrchestratorEnv,
  testToken,
  toolAddressEnv,
  workspaceService,
} from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

interface OtlpSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
}

const SPAN_KIND_SERVER = 2;
const SPAN_KIND_CLIENT = 3;

/** One OTLP log record, as the collector's logs pipeline would take it. */
interface OtlpLog {
  service: string;
  scope: string;
  traceId: string;
  body: unknown;
  attributes: Record<string, unknown>;
}

type AnyValue = Record<string, unknown>;

const spans: OtlpSpan[] = [];
const logRecords: OtlpLog[] = [];
let receiver: Server;
let endpoint = "";
const data = tempDir("e2e");
const procs: ServiceProcess[] = [];

function value(v: Record<string, unknown>): unknown {
  return v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue;
}

/** An OTLP AnyValue back to JSON (an absent value is JSON's null; int64 may arrive as a string). */
function json(v: AnyValue | undefined): unknown {
  if (!v || Object.keys(v).length === 0) return null;
  if ("intValue" in v) return Number(v.intValue);
  if ("kvlistValue" in v)
    return Object.fromEntries(
      ((v.kvlistValue as { values?: { key: string; value?: AnyValue }[] }).values ?? []).map((kv) => [
        kv.key,
        json(kv.value),
      ]),
    );
  if ("arrayValue" in v) return ((v.arrayValue as { values?: AnyValue[] }).values ?? []).map(json);
  return value(v);
}

interface ResourceAttrs {
  resource: { attributes: { key: string; value: Record<string, unknown> }[] };
}

function serviceOf(r: ResourceAttrs): string {
  return String(value(r.resource.attributes.find((a) => a.key === "service.name")?.value ?? {}));
}

function collectLogs(payload: {
  resourceLogs: (ResourceAttrs & {
    scopeLogs: { scope?: { name?: string }; logRecords?: Record<string, unknown>[] }[];
  })[];
}): void {
  for (const rl of payload.resourceLogs) {
    for (const sl of rl.scopeLogs) {
      for (const r of sl.logRecords ?? []) {
        logRecords.push({
          service: serviceOf(rl),
          scope: String(sl.scope?.name ?? ""),
          traceId: String(r.traceId ?? ""),
          body: json(r.body as AnyValue),
          attributes: Object.fromEntries(
            ((r.attributes ?? []) as { key: string; value: AnyValue }[]).map((a) => [a.key, json(a.value)]),
          ),
        });
      }
    }
  }
}

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      if (req.url === "/v1/logs") {
        collectLogs(JSON.parse(body));
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
        return;
      }
      const payload = JSON.parse(body) as {
        resourceSpans: {
          resource: { attributes: { key: string; value: Record<string, unknown> }[] };
          scopeSpans: { spans: Record<string, unknown>[] }[];
        }[];
      };
      for (const rs of payload.resourceSpans) {
        const service = String(value(rs.resource.attributes.find((a) => a.key === "service.name")?.value ?? {}));
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            spans.push({
              service,
              traceId: String(s.traceId),
              spanId: String(s.spanId),
              parentSpanId: String(s.parentSpanId ?? ""),
              name: String(s.name),
              kind: Number(s.kind),
              attributes: Object.fromEntries(
                ((s.attributes ?? []) as { key: string; value: Record<string, unknown> }[]).map((a) => [
                  a.key,
                  value(a.value),
                ]),
              ),
            });
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((ok) => receiver.listen(0, "127.0.0.1", () => ok()));
  endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await Promise.all(procs.map((p) => kill(p)));
  await new Promise<void>((ok) => receiver.close(() => ok()));
  data.remove();
});

const otel = () => ({
  OTEL_TRACES_EXPORTER: "otlp",
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${endpoint}/v1/traces`,
  OTEL_BSP_SCHEDULE_DELAY: "100",
  OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: "http/json",
  OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: `${endpoint}/v1/logs`,
  OTEL_BLRP_SCHEDULE_DELAY: "100",
});

describe("distributed tracing", () => {
  it("a refund session is one trace with spans from all four services, parent-linked, matching the JSONL trace id", async () => {
    const tools = await startAllTools(data.dir, { env: otel() });
    procs.push(...Object.values(tools));
    const orchestrator = await spawnTool(workspaceService("orchestrator").entry, {
      ...otel(),
      LOOPGUARD_DATA_DIR: data.dir,
      ...testOrchestratorEnv(),
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      ...toolAddressEnv(tools),
    });
    procs.push(orchestrator);
    const token = await testToken({ subject: "test", scopes: SESSION_OPERATOR_SCOPES });
    const api = createRawClient(OrchestratorService, orchestrator.address, { token });
    const { session } = await api.startSession({
      goal: "Refund 1.00 of ord_DEMO00000001",
      task: {
        kind: "refund",
        order_id: "ord_DEMO00000001",
        amount_cents: 100,
        reason: "DAMAGED",
        id_card: "110101198003121232",
        phone: "+8613800138000",
      },
      scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
    });
    let state = session!.state;
    for (let i = 0; i < 200 && state !== SessionState.DONE && state !== SessionState.FAILED; i += 1) {
      await sleep(50);
      state = (await api.getSession({ sessionId: session!.sessionId })).session!.state;
    }
    expect(SessionState[state]).toBe("DONE");
    const traceId = session!.traceId;
    const records = (await api.getTrace({ sessionId: session!.sessionId })).records.map(
      (r) => JSON.parse(r) as { trace_id: string; traceparent: string },
    );
    expect(new Set(records.map((r) => r.trace_id))).toEqual(new Set([traceId]));
    api.close();

    // Each process exports in its own batches: wait until every span asserted below has arrived
    // (the four tool server spans, their client and step parents, the policy span), not only
    // until each service has sent something.
    const services = ["orchestrator", "kb-search", "billing", "risk"];
    const toolMethods = ["Search", "GetOrder", "QueryRisk", "Refund"];
    const arrived = () => {
      const inTrace = spans.filter((s) => s.traceId === traceId);
      const byId = new Map(inTrace.map((s) => [s.spanId, s]));
      const servers = inTrace.filter((s) => s.kind === SPAN_KIND_SERVER && s.service !== "orchestrator");
      return (
        toolMethods.every((m) => servers.some((s) => s.name.endsWith(`/${m}`))) &&
        servers.every((s) => byId.get(byId.get(s.parentSpanId)?.parentSpanId ?? "") !== undefined) &&
        inTrace.some((s) => s.name === "policy.decide")
      );
    };
    for (let i = 0; i < 150 && !arrived(); i += 1) await sleep(100);
    const inTrace = spans.filter((s) => s.traceId === traceId);
    expect(new Set(inTrace.map((s) => s.service))).toEqual(new Set(services));
    expect(
      spans
        .filter((s) => s.name.includes("Refund") || s.name.includes("QueryRisk"))
        .every((s) => s.traceId === traceId),
    ).toBe(true);

    const byId = new Map(inTrace.map((s) => [s.spanId, s]));
    const servers = inTrace.filter((s) => s.kind === SPAN_KIND_SERVER && s.service !== "orchestrator");
    expect(servers.length).toBeGreaterThanOrEqual(4);
    for (const server of servers) {
      const client = byId.get(server.parentSpanId);
      expect(client?.kind, `parent of ${server.service} ${server.name}`).toBe(SPAN_KIND_CLIENT);
      expect(client?.service).toBe("orchestrator");
      // A tool call of the session's, or one of the host's own live reads before a money call.
      const step = byId.get(client!.parentSpanId);
      expect(step?.name).toMatch(/^(execute_tool|guard) /);
      expect(step?.attributes["gen_ai.tool.name"]).toBeDefined();
      if (step?.name.startsWith("execute_tool")) expect(step?.attributes["loopguard.served_from"]).toBe("live");
    }
    expect(inTrace.some((s) => s.name === "guard billing_refund")).toBe(true);
    const decide = inTrace.find((s) => s.name === "policy.decide");
    expect(decide?.attributes["gen_ai.operation.name"]).toBe("chat");
    for (const s of inTrace) {
      expect(JSON.stringify(s.attributes)).not.toMatch(/110101198003121232|13800138000/);
    }

    // The logs pipeline: each step record of the session, the same redacted record as the JSONL
    // file and GetTrace hold, from the orchestrator alone, linked to the session's trace.
    const stepLogs = () => logRecords.filter((l) => l.attributes["session.id"] === session!.sessionId);
    for (let i = 0; i < 100 && stepLogs().length < records.length; i += 1) await sleep(100);
    expect(stepLogs().map((l) => l.body)).toEqual(records);
    for (const log of stepLogs()) {
      expect([log.service, log.scope, log.traceId, log.attributes["loopguard.trace_id"]]).toEqual([
        "orchestrator",
        "loopguard.orchestrator.steps",
        traceId,
        traceId,
      ]);
    }
    expect(new Set(logRecords.map((l) => l.service))).toEqual(new Set(["orchestrator"]));
    expect(JSON.stringify(logRecords)).not.toMatch(/110101198003121232|13800138000/);
  });
});
