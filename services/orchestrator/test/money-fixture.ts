// What the money tests share: fresh tool processes per test (a fresh ledger), orchestrators in
// process with the config a test needs (optionally driven by a scripted OpenAI-compatible model),
// the ledger's refunds read back directly, and one clean-up for afterEach.
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { testToken } from "@loopguard/tool-sdk/testing";
import { afterEach, beforeEach } from "vitest";
import { type ScriptedReply, startFakeChatServer } from "./fake-chat-server.js";
import { isEnded, startOrchestrator, startTools, type TestOrchestrator, type Tools } from "./harness.js";

/** Ended, or waiting for a human. */
export const waiting = (s: Session) => s.state === SessionState.AWAITING_APPROVAL || isEnded(s);

/** Registers beforeEach/afterEach; `tools()` is the current test's tool processes. */
export function moneyFixture() {
  let tools: Tools | undefined;
  const cleanups: (() => Promise<void>)[] = [];
  beforeEach(async () => {
    tools = await startTools();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await tools?.stop();
  });
  const current = (): Tools => tools!;

  async function orchestrator(env: Record<string, string> = {}): Promise<TestOrchestrator> {
    const orch = await startOrchestrator(current(), { APPROVAL_TTL_MS: "60000", ...env });
    cleanups.push(() => orch.close());
    return orch;
  }

  /** An orchestrator whose openai policy answers from `script` (one reply per request, or one function for all). */
  async function withModel(script: ScriptedReply[] | ScriptedReply, env: Record<string, string> = {}) {
    const chat = await startFakeChatServer(script);
    cleanups.push(() => chat.close());
    return { chat, orch: await orchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model", ...env }) };
  }

  /** An order's refunds, from the ledger. */
  async function refundsOf(orderId: string) {
    const billing = createRawClient(BillingService, current().billing.address, {
      token: await testToken({ scopes: ["billing:read"] }),
    });
    try {
      return (await billing.listRefunds({ orderId })).refunds;
    } finally {
      billing.close();
    }
  }

  /** The amounts of an order's refunds, from the ledger. */
  const amountsOf = async (orderId: string): Promise<number[]> =>
    (await refundsOf(orderId)).map((r) => Number(r.amountCents));

  return {
    tools: current,
    orchestrator,
    withModel,
    refundsOf,
    amountsOf,
    onCleanUp: (c: () => Promise<void>) => cleanups.push(c),
  };
}
