// The credential a tool receives is good for that tool, that session and that method only: a
// token captured at kb-search (here by a stand-in kb-search that records what it is sent) is
// refused by billing and by the orchestrator's own API, and one minted for risk's QueryRisk by
// risk's GetCustomerRisk (the same scope).
import { type sendUnaryData, Server, ServerCredentials, type ServerUnaryCall } from "@grpc/grpc-js";
import { refusal } from "@loopguard/test-kit";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService, SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { create } from "@bufbuild/protobuf";
import { CallError, createRawClient, serviceDefinition, status } from "@loopguard/tool-sdk";
import { TEST_CALL_SECRETS, TEST_CALL_SECRETS_FILE, TEST_ORCHESTRATOR_KEY } from "@loopguard/tool-sdk/testing";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ToolTokens } from "../src/guard/tool-tokens.js";
import { ToolRegistry } from "../src/tool-registry.js";
import { startOrchestrator, startTools, type TestOrchestrator, type Tools, waitForSession } from "./harness.js";

let tools: Tools;
let orch: TestOrchestrator;
let standIn: Server;
const captured: string[] = [];

beforeAll(async () => {
  tools = await startTools();
  // A kb-search that answers every search and keeps the bearer token each call brought.
  standIn = new Server();
  standIn.addService(serviceDefinition(KbSearchService), {
    search: (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
      captured.push(String(call.metadata.get("authorization")[0] ?? "").replace(/^Bearer /, ""));
      callback(
        null,
        create(SearchResponseSchema, { hits: [{ docId: "refund-policy", version: 1, title: "Refund policy" }] }),
      );
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    standIn.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e: Error | null, p: number) =>
      e ? reject(e) : resolve(p),
    ),
  );
  const kb = { ...tools.kb, address: `127.0.0.1:${port}` };
  orch = await startOrchestrator({ ...tools, kb, all: { ...tools.all, "kb-search": kb } });
});
afterAll(async () => {
  await orch?.close();
  standIn?.forceShutdown();
  await tools?.stop();
});

describe("per-call tool tokens", () => {
  it("name the session, the tool and only the method's scope, and expire with the call", async () => {
    const { session } = await orch.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
    });
    await waitForSession(orch.api, session!.sessionId);
    const token = captured.at(-1)!;
    const claims = decodeJwt(token);
    // A call credential under kb-search's own key (the test orchestrator holds call secrets).
    expect(decodeProtectedHeader(token)).toMatchObject({ alg: "HS256", kid: "test-call" });
    expect(claims).toMatchObject({
      sub: `session:${session!.sessionId}`,
      aud: "kb-search",
      scope: "kb:read",
      mth: "/loopguard.kb.v1.KbSearchService/Search",
      iss: "loopguard",
    });
    expect(typeof claims.jti).toBe("string");
    // kb-search's SLA timeout (1 s) plus 5 s of clock skew, rounded up to the second.
    expect(claims.exp! - claims.iat!).toBeLessThanOrEqual(7);
  });

  it("a token captured at kb-search is refused by billing and by the orchestrator API", async () => {
    const token = captured.at(-1)!;
    const billing = createRawClient(BillingService, tools.billing.address, { token });
    const api = createRawClient(OrchestratorService, orch.server.address, { token });
    try {
      const atBilling = await refusal(billing.getOrder({ orderId: "ord_DEMO00000001" }), CallError);
      expect(atBilling.code).toBe(status.UNAUTHENTICATED);
      expect(atBilling.message).toContain("billing");
      const atApi = await refusal(api.listSessions({}), CallError);
      expect(atApi.code).toBe(status.UNAUTHENTICATED);
    } finally {
      billing.close();
      api.close();
    }
  });

  it("a credential minted for risk's QueryRisk is refused by risk's GetCustomerRisk (the same scope), with either kind of credential", async () => {
    const registry = new ToolRegistry();
    const withSecrets = new ToolTokens(TEST_ORCHESTRATOR_KEY, {
      file: TEST_CALL_SECRETS_FILE,
      secrets: TEST_CALL_SECRETS,
    });
    for (const tokens of [withSecrets, new ToolTokens(TEST_ORCHESTRATOR_KEY)]) {
      const token = await tokens.for("s1", registry.get("risk_query_risk")!, Date.now() + 1500);
      const risk = createRawClient(RiskService, tools.risk.address, { token });
      try {
        const error = await refusal(risk.getCustomerRisk({ customerId: "cust_demo_0002" }), CallError);
        expect([status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
        expect(error.message).toMatch(/issued for \/loopguard.risk.v1.RiskService\/QueryRisk, not .*GetCustomerRisk/);
        const own = await tokens.for("s1", registry.get("risk_get_customer_risk")!, Date.now() + 1500);
        await expect(risk.getCustomerRisk({ customerId: "cust_demo_0002" }, { token: own })).resolves.toBeDefined();
      } finally {
        risk.close();
      }
    }
  });
});
