// A tool's answer is bounded by a size the orchestrator chooses (ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES), not by grpc-js's
// 4 MiB: a tool (buggy or compromised) that answers megabytes is refused before the answer is decoded, checked against
// its contract or redacted, so the one event loop that renews every session's lease and answers GetSession never stalls
// on it; the session is told plainly, and the tool is not asked again for the same answer.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  Client,
  credentials,
  type sendUnaryData,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceDefinition,
} from "@grpc/grpc-js";
import {
  BillingService,
  ListRefundsResponseSchema,
  RefundReason,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chatCompletion, type FakeChatServer, startFakeChatServer } from "./fake-chat-server.js";
import {
  ALL_SCOPES,
  LOW_RISK_CUSTOMER,
  refundsOf,
  startRefund,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const suite = useSuite({ orchestrator: false });
const ORDER = "ord_138001380000";
const TASK = { kind: "refund", order_id: ORDER, amount_cents: 500, reason: "DAMAGED", ...LOW_RISK_CUSTOMER };

/** An encoded ListRefunds answer of `count` refunds whose ids are digits a redactor must look at. */
function refundsAnswer(count: number): Buffer {
  const refunds = Array.from({ length: count }, (_, i) => ({
    refundId: `rf_138001380${String(i).padStart(7, "0")}`,
    orderId: ORDER,
    amountCents: 500_000n,
    reason: RefundReason.DAMAGED,
    createdAt: { seconds: 1_700_000_000n, nanos: 0 },
  }));
  return Buffer.from(toBinary(ListRefundsResponseSchema, create(ListRefundsResponseSchema, { refunds })));
}

/** Just under grpc-js's own 4 MiB limit: what a tool could send the orchestrator before it chose a bound. */
const HUGE = refundsAnswer(72_000);
const SMALL = refundsAnswer(3);

const asIs = (bytes: Buffer) => bytes;
/** Billing's methods as grpc-js sees them, with the bytes passed on as they are: neither decoded nor encoded. */
const BILLING_AS_BYTES: ServiceDefinition = Object.fromEntries(
  BillingService.methods.map((method) => [
    method.localName,
    {
      ...{ path: `/${BillingService.typeName}/${method.name}`, requestStream: false, responseStream: false },
      ...{ requestSerialize: asIs, requestDeserialize: asIs, responseSerialize: asIs, responseDeserialize: asIs },
    },
  ]),
);

/** Binds `server` on loopback; its address. */
async function listen(server: Server): Promise<string> {
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return `127.0.0.1:${port}`;
}

/** A billing stand-in whose ListRefunds sends `answer`'s bytes as they are (encoded once, so it costs this process nothing per call). */
async function billingAnswering(answer: () => Buffer) {
  let calls = 0;
  const server = new Server();
  server.addService(BILLING_AS_BYTES, {
    listRefunds: (_call: unknown, reply: sendUnaryData<Buffer>) => {
      calls += 1;
      reply(null, answer());
    },
  });
  return { address: await listen(server), calls: () => calls, close: () => server.forceShutdown() };
}

let answer = SMALL;
let billing: Awaited<ReturnType<typeof billingAnswering>>;
let chat: FakeChatServer;
let orch: TestOrchestrator;

beforeAll(async () => {
  billing = await billingAnswering(() => answer);
  // The model lists the order's refunds once, then answers.
  chat = await startFakeChatServer((request) =>
    request.body.messages.some((m: { role: string }) => m.role === "tool")
      ? chatCompletion({ content: "Listed." })
      : chatCompletion({
          toolCalls: [{ id: "l1", name: "billing_list_refunds", arguments: JSON.stringify({ order_id: ORDER }) }],
        }),
  );
  orch = await suite.startOrchestrator({
    OPENAI_BASE_URL: chat.baseUrl,
    OPENAI_MODEL: "gpt-4o-mini",
    BILLING_ADDR: billing.address,
  });
});
afterAll(async () => {
  billing?.close();
  await chat?.close();
});

/** Runs one listing session; what the model was told of the tool's answer, and the event loop's longest stall meanwhile. */
async function listRefunds() {
  const stalls = monitorEventLoopDelay({ resolution: 10 });
  stalls.enable();
  const { session } = await orch.api.startSession({
    goal: "List the refunds of the order",
    task: TASK as never,
    scopes: ALL_SCOPES,
    policy: "openai",
  });
  const done = await waitForSession(orch.api, session!.sessionId);
  stalls.disable();
  const told = chat.requests.at(-1)!.body.messages.find((m: { role: string }) => m.role === "tool").content as string;
  return { done, told: JSON.parse(told) as Record<string, any>, longestStallMs: stalls.max / 1e6 };
}

async function callsCounted(outcome: string): Promise<number> {
  const calls = await orch.registry.getSingleMetric("loopguard_tool_client_calls_total")!.get();
  return calls.values
    .filter((v) => v.labels.tool === "billing" && v.labels.outcome === outcome)
    .reduce((sum, v) => sum + v.value, 0);
}

describe("a tool's answer larger than the orchestrator's bound", () => {
  it("is refused before it is decoded: the event loop stays free, the tool is asked once, the session is told why", async () => {
    answer = HUGE;
    const before = billing.calls();
    const { done, told, longestStallMs } = await listRefunds();
    expect(longestStallMs).toBeLessThan(200);
    expect(billing.calls() - before).toBe(1);
    expect(told.ok).toBe(false);
    expect(told.error.retryable).toBe(false);
    expect(told.error.message).toContain(`billing answered ListRefunds with ${HUGE.length} bytes`);
    expect(told.error.message).toContain("more than the 262144 this caller accepts");
    expect(done.stopReason).toBe("done");
    expect(await callsCounted("answer_too_large")).toBe(1);
  });

  it("leaves an answer within the bound as it was", async () => {
    answer = SMALL;
    const { told } = await listRefunds();
    expect(told.ok).toBe(true);
    expect(told.data.refunds).toHaveLength(3);
  });
});

/** An unknown field of 300 KB: an answer its contract still accepts, over the orchestrator's bound. */
const PADDING = Buffer.from(
  new BinaryWriter().tag(999, WireType.LengthDelimited).bytes(new Uint8Array(300_000)).finish(),
);

/** A proxy in front of the real billing that pads billing's first Refund answer with PADDING (after the refund was made). */
async function padFirstRefundAnswer(billingAddress: string) {
  const upstream = new Client(billingAddress, credentials.createInsecure());
  const server = new Server();
  const handlers: Record<string, (call: ServerUnaryCall<Buffer, Buffer>, reply: sendUnaryData<Buffer>) => void> = {};
  let refunds = 0;
  for (const method of BillingService.methods) {
    const { path } = BILLING_AS_BYTES[method.localName]!;
    handlers[method.localName] = (call, reply) => {
      const pad = method.name === "Refund" && ++refunds === 1;
      upstream.makeUnaryRequest(path, asIs, asIs, call.request, call.metadata, {}, (error, answer?: Buffer) =>
        error ? reply(error) : reply(null, pad ? Buffer.concat([answer!, PADDING]) : answer),
      );
    };
  }
  server.addService(BILLING_AS_BYTES, handlers);
  const address = await listen(server);
  return {
    address,
    close: () => {
      server.forceShutdown();
      upstream.close();
    },
  };
}

describe("a refund whose answer is larger than the orchestrator's bound", () => {
  it("is not taken as not made: its outcome is unclear, it is sent again with the same key, and the refund is made once", async () => {
    const proxy = await padFirstRefundAnswer(suite.tools.billing.address);
    suite.onCleanUp(() => proxy.close());
    const refunding = await suite.startOrchestrator({ BILLING_ADDR: proxy.address });
    const id = await startRefund(refunding.api, "ord_DEMO00000001", 300, LOW_RISK_CUSTOMER);
    const done = await waitForSession(refunding.api, id);
    const refunds = await refundsOf(suite.tools, "ord_DEMO00000001");
    expect(refunds).toHaveLength(1);
    expect([done.stopReason, done.outcome?.kind]).toEqual(["done", "succeeded"]);
    expect(done.answer).toContain(refunds[0]!.refundId);
    const { transitions } = await refunding.api.getSessionDetail({ sessionId: id });
    expect(transitions.some((t) => /^re-sending billing_refund/.test(t.reason ?? ""))).toBe(true);
  });
});
