/// <reference lib="dom" />
// The approvals queue of the dashboard when a session moves on to a new approval between two
// polls: headless Chromium against an orchestrator whose model (a fake speaking the chat wire
// protocol) asks for two refunds above the task's amount, one after the other.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testToken } from "@loopguard/tool-sdk/testing";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HAVE_CHROMIUM, launchChromium } from "./chromium.js";
import { chatCompletion, type FakeChatServer, startFakeChatServer, toolCall, toolResults } from "./fake-chat-server.js";
import {
  ALL_SCOPES,
  decisionOn,
  isEnded,
  startOrchestrator,
  startTools,
  type TestOrchestrator,
  type Tools,
  waitForSession,
} from "./harness.js";

let tools: Tools;
let orch: TestOrchestrator;
let chat: FakeChatServer;
let browser: Browser;
let page: Page;

const refund = (amountCents: number) =>
  JSON.stringify({ orderId: "ord_DEMO00000001", amountCents, reason: "REFUND_REASON_DAMAGED" });

describe.skipIf(!HAVE_CHROMIUM)("the dashboard's approvals queue", () => {
  beforeAll(async () => {
    tools = await startTools();
    chat = await startFakeChatServer((request) => {
      const seen = toolResults(request);
      if (!seen.r1) return toolCall("billing_refund", refund(600), "r1");
      if (!seen.r2) return toolCall("billing_refund", refund(700), "r2");
      return chatCompletion({ content: "Both refunds were decided." });
    });
    orch = await startOrchestrator(tools, {
      APPROVAL_TTL_MS: "120000",
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "fake-model",
    });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    const approver = await testToken({ subject: "ops:bob", scopes: ["sessions:read", "approvals:write"] });
    await page.goto(`${orch.httpUrl}/#token=${approver}`);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await orch?.close();
    await chat?.close();
    await tools?.stop();
  });

  it("shows the approval a session waits on now, not the one it waited on before, and deciding it works", async () => {
    // Above the task's 500 cents: each refund the model asks for waits for a person.
    const { session } = await orch.api.startSession({
      goal: "Refund as the task says",
      task: { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 500, reason: "DAMAGED" } as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const id = session!.sessionId;
    const waiting = (s: { state: SessionState }) => s.state === SessionState.AWAITING_APPROVAL;
    const first = (await waitForSession(orch.api, id, waiting, 20_000)).pendingApproval!;
    const item = page.locator(`[data-testid="approval-item"][data-session-id="${id}"]`);
    await page.locator(`[data-testid="approval-item"][data-approval-id="${first.approvalId}"]`).waitFor();

    // Another approver approves the first; the session goes on and waits on the second at once.
    await orch.approver.resolveApproval(decisionOn(id, first, true, "ok"));
    const second = (
      await waitForSession(
        orch.api,
        id,
        (s) => waiting(s) && s.pendingApproval?.approvalId !== first.approvalId,
        20_000,
      )
    ).pendingApproval!;
    await page.locator(`[data-testid="approval-item"][data-approval-id="${second.approvalId}"]`).waitFor();
    expect(await item.count()).toBe(1);
    expect(await item.locator(".approval-args").textContent()).toContain('"amountCents":"700"');

    // The page's Approve decides the second approval: the session, waiting on nothing else, ends.
    await item.getByTestId("approve").click();
    expect((await waitForSession(orch.api, id, isEnded, 20_000)).stopReason).toBe("done");
  });
});
