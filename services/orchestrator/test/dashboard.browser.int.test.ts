/// <reference lib="dom" />
// The dashboard as an operator uses it: headless Chromium (playwright-core, the system's
// /usr/bin/chromium) against the harness' orchestrator and the three tools as real processes.
// Screenshots go to test-results/ at the repository root.
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import { testToken, SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../src/guard/budget.js";
import { HAVE_CHROMIUM, launchChromium } from "./chromium.js";
import { HIGH_RISK_REFUND, startOrchestrator, startTools, type TestOrchestrator, type Tools } from "./harness.js";

const SCREENSHOTS = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "test-results");
const OPERATOR_SCOPES = [...SESSION_OPERATOR_SCOPES, "approvals:write"];

let tools: Tools;
let orch: TestOrchestrator;
/** The API as the operator signed in to the page (who starts its sessions) sees it. */
let api: RawClient<typeof OrchestratorService>;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

async function newPage(): Promise<Page> {
  const p = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  p.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`));
  // CSP violations and failed module loads surface as console errors.
  p.on("console", (message) => {
    if (message.type() === "error" && !/status of 40[13]/.test(message.text()))
      pageErrors.push(`console: ${message.text()}`);
  });
  return p;
}

function operatorToken(scopes = OPERATOR_SCOPES): Promise<string> {
  return testToken({ subject: "ops:browser", scopes, ttlSeconds: 600 });
}

const row = (p: Page, id: string, state?: string) =>
  p.locator(`[data-testid="session-row"][data-session-id="${id}"]${state ? `[data-state="${state}"]` : ""}`);

async function startFromForm(p: Page, goal: string, task: Record<string, unknown>): Promise<string> {
  await p.getByTestId("start-goal").fill(goal);
  await p.getByTestId("start-task").fill(JSON.stringify(task, null, 2));
  await p.getByTestId("start-submit").click();
  const started = p.getByTestId("start-session-id");
  await p.waitForFunction((previous) => {
    const el = document.querySelector('[data-testid="start-session-id"]');
    return el !== null && el.textContent !== previous;
  }, lastStarted);
  lastStarted = (await started.textContent()) ?? "";
  expect(lastStarted).toMatch(/^ses_[a-z0-9]{20}$/);
  return lastStarted;
}
let lastStarted = "";

describe.skipIf(!HAVE_CHROMIUM)("the dashboard in headless Chromium", () => {
  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    tools = await startTools();
    orch = await startOrchestrator(tools, { APPROVAL_TTL_MS: "120000" });
    api = createRawClient(OrchestratorService, orch.server.address, { token: await operatorToken() });
    browser = await launchChromium();
    page = await newPage();
    await page.goto(`${orch.httpUrl}/#token=${await operatorToken()}`);
  }, 60_000);
  afterAll(async () => {
    api?.close();
    await browser?.close();
    await orch?.close();
    await tools?.stop();
  });

  it("takes the token from the URL fragment, keeps it out of the address bar, and goes live", async () => {
    await page.getByTestId("count-total").waitFor();
    expect(page.url()).not.toContain("token");
    expect(await page.evaluate(() => sessionStorage.getItem("loopguard.token"))).toMatch(/^eyJ/);
    await page.waitForFunction(() => document.querySelector('[data-testid="status"]')?.textContent?.startsWith("live"));
    expect(await page.getByTestId("auth-panel").isHidden()).toBe(true);
  });

  it("a question started from the form shows up in the table and reaches DONE without a reload", async () => {
    await page.evaluate(() => Object.assign(window, { notReloaded: true }));
    await page.getByTestId("preset-question").click();
    await page.getByTestId("start-submit").click();
    await page.getByTestId("start-session-id").waitFor();
    const id = (await page.getByTestId("start-session-id").textContent())!;
    lastStarted = id;
    await row(page, id).waitFor({ timeout: 5000 });
    await row(page, id, "DONE").waitFor({ timeout: 20_000 });
    expect(await row(page, id).getByTestId("cell-stop").textContent()).toBe("done");
    expect(await row(page, id).getByTestId("cell-outcome").textContent()).toBe("succeeded");
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await page.waitForFunction(
      () => Number(document.querySelector('[data-testid="count-DONE"]')?.getAttribute("data-count")) >= 1,
    );
  }, 40_000);

  it("a high-risk refund waits in the approvals queue; Approve runs it to DONE; its panel shows the timeline, served_from and the trace id", async () => {
    const id = await startFromForm(page, "Refund 10.00 of ord_DEMO00000008 (damaged)", HIGH_RISK_REFUND);
    const item = page.locator(`[data-testid="approval-item"][data-session-id="${id}"]`);
    await item.waitFor({ timeout: 20_000 });
    const shown = (await item.textContent()) ?? "";
    expect(shown).toContain("billing_refund");
    expect(shown).toMatch(/risk score/);
    expect(shown).not.toContain(HIGH_RISK_REFUND.id_card);
    await page.waitForFunction(
      () => Number(document.querySelector('[data-testid="count-AWAITING_APPROVAL"]')?.getAttribute("data-count")) >= 1,
    );
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-approval-waiting.png") });

    // Four eyes: the operator who started it cannot approve it; the page says so and nothing runs.
    expect(await page.getByTestId("approver-subject").textContent()).toBe("ops:browser");
    await item.getByTestId("approve").click();
    await item.getByTestId("approval-message").filter({ hasText: "cannot also approve" }).waitFor({ timeout: 5000 });
    expect((await api.getSession({ sessionId: id })).session!.state).toBe(SessionState.AWAITING_APPROVAL);

    // An approver, signed in with her own token, sees it in her queue (and only while it waits) and approves it as herself.
    const alice = await newPage();
    await alice.goto(
      `${orch.httpUrl}/#token=${await testToken({ subject: "ops:alice", scopes: ["sessions:read", "approvals:write"], ttlSeconds: 600 })}`,
    );
    const aliceItem = alice.locator(`[data-testid="approval-item"][data-session-id="${id}"]`);
    await aliceItem.waitFor({ timeout: 20_000 });
    expect(await alice.getByTestId("approver-subject").textContent()).toBe("ops:alice");
    expect(await aliceItem.getByTestId("approval-creator").textContent()).toContain("ops:browser");
    await row(alice, id, "AWAITING_APPROVAL").waitFor({ timeout: 5000 });
    await aliceItem.getByTestId("approval-reason").fill("photos checked");
    await aliceItem.getByTestId("approve").click();
    await aliceItem.waitFor({ state: "detached", timeout: 5000 });
    await row(alice, id).waitFor({ state: "detached", timeout: 5000 });
    await alice.close();
    await row(page, id, "DONE").waitFor({ timeout: 20_000 });
    await item.waitFor({ state: "detached", timeout: 5000 });

    await row(page, id).click();
    const panel = page.getByTestId("session-panel");
    await panel.waitFor();
    await panel.locator('[data-testid="detail-state"] [data-state="DONE"]').waitFor({ timeout: 5000 });
    const done = (await api.getSession({ sessionId: id })).session!;
    expect(await panel.getByTestId("detail-trace-id").textContent()).toBe(done.traceId);
    expect(done.traceId).toMatch(/^[0-9a-f]{32}$/);
    const timeline = await panel
      .getByTestId("timeline-item")
      .evaluateAll((items) => items.map((i) => i.getAttribute("data-to")));
    expect(timeline[0]).toBe("THINKING");
    expect(timeline).toContain("AWAITING_APPROVAL");
    expect(timeline.at(-1)).toBe("DONE");
    expect(await panel.getByTestId("timeline").textContent()).toContain("approved by ops:alice: photos checked");
    expect(await panel.getByTestId("detail-created-by").textContent()).toBe("ops:browser");
    const servedFrom = await panel.getByTestId("served-from").allTextContents();
    expect(servedFrom.length).toBeGreaterThanOrEqual(4);
    expect(servedFrom).toContain("live");
    expect(await panel.getByTestId("detail-answer").textContent()).toMatch(/rf_[A-Za-z0-9]{16}/);
    // Beside the outcome: how sure the policy was of its answer (live reads, a policy document found).
    expect(done.confidence).toBe(0.9);
    expect(await panel.getByTestId("detail-confidence").textContent()).toBe("confidence: 0.9");
    expect(
      await panel.locator('[data-testid="budget-row"][data-budget="steps"] [data-testid="budget-left"]').textContent(),
    ).toBe(String(DEFAULT_BUDGET.maxSteps - (done.usage?.steps ?? 0)));
    await panel.getByTestId("logs").filter({ hasText: "session ended" }).waitFor({ timeout: 5000 });
    expect(await panel.textContent()).not.toContain(HIGH_RISK_REFUND.phone);
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-session-panel.png") });
    await page.getByTestId("detail-body").evaluate((el) => el.scrollTo(0, el.scrollHeight));
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-session-panel-bottom.png") });
    await page.getByTestId("detail-close").click();
    await panel.waitFor({ state: "hidden" });
  }, 60_000);

  it("the tools panel lists kb-search, billing and risk with a closed breaker and their latency", async () => {
    const tools = page.getByTestId("tool-row");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="tool-row"]').length === 3);
    expect((await tools.evaluateAll((rows) => rows.map((r) => r.getAttribute("data-tool")))).sort()).toEqual([
      "billing",
      "kb-search",
      "risk",
    ]);
    expect(await page.getByTestId("tool-breaker").allTextContents()).toEqual(["closed", "closed", "closed"]);
    expect(await page.locator('[data-tool="kb-search"] [data-testid="tool-p95"]').textContent()).toMatch(
      /^\d+(\.\d+)? ms$/,
    );
    expect(
      Number(await page.locator('[data-tool="billing"] [data-testid="tool-calls"]').textContent()),
    ).toBeGreaterThan(0);
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-overview.png") });
  });

  it("shows data as text: a goal with markup is not interpreted", async () => {
    const goal = `<img src=x onerror="window.injected=1"> What is the refund policy?`;
    const id = await startFromForm(page, goal, {});
    await row(page, id).waitFor({ timeout: 5000 });
    expect(await row(page, id).getByTestId("cell-goal").textContent()).toBe(goal);
    expect(await row(page, id).locator("img").count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { injected?: number }).injected)).toBeUndefined();
  });

  it("refuses to start with a read-only token and says which scope is missing", async () => {
    const readOnly = await newPage();
    try {
      await readOnly.goto(`${orch.httpUrl}/#token=${await operatorToken(["sessions:read"])}`);
      await readOnly.getByTestId("preset-question").click();
      await readOnly.getByTestId("start-submit").click();
      await readOnly.waitForFunction(() =>
        document.querySelector('[data-testid="start-result"]')?.textContent?.includes("sessions:write"),
      );
    } finally {
      await readOnly.close();
    }
  });

  it("without a token the page asks for one, and a pasted token works", async () => {
    const fresh = await newPage();
    try {
      await fresh.goto(`${orch.httpUrl}/`);
      await fresh.getByTestId("auth-panel").waitFor();
      await fresh.getByTestId("token-input").fill(await operatorToken());
      await fresh.getByTestId("token-submit").click();
      await fresh.getByTestId("auth-panel").waitFor({ state: "hidden" });
      await fresh.getByTestId("session-row").first().waitFor();
    } finally {
      await fresh.close();
    }
  });

  it("with 1,000 sessions in the store the page stays usable: the first page renders and next/prev page through", async () => {
    // Stop driving so the inserted sessions stay IDLE instead of all running at once.
    await orch.orchestrator.stop();
    for (let i = 0; i < 1000; i += 1) {
      await orch.orchestrator.store.create({
        id: `ses_bulk${String(i).padStart(16, "0")}`,
        goal: `bulk question ${i}`,
        task: {},
        budget: DEFAULT_BUDGET,
        scopes: ["kb:read"],
        policy: "scripted",
        createdBy: "ops:browser",
      });
    }
    await page.waitForFunction(
      () => Number(document.querySelector('[data-testid="count-total"]')?.getAttribute("data-count")) >= 1000,
      undefined,
      { timeout: 5000 },
    );
    const ids = () =>
      page.getByTestId("session-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-session-id")));
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="session-row"]').length === 50);
    expect(await page.getByTestId("page-info").textContent()).toBe("page 1 · 1–50");
    const first = await ids();

    const started = Date.now();
    await page.getByTestId("page-next").click();
    await page.waitForFunction(
      () => document.querySelector('[data-testid="page-info"]')?.textContent === "page 2 · 51–100",
    );
    expect(Date.now() - started).toBeLessThan(2000);
    const second = await ids();
    expect(second).toHaveLength(50);
    expect(second.filter((id) => first.includes(id))).toEqual([]);
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-page-2.png") });

    await page.getByTestId("page-prev").click();
    await page.waitForFunction(
      () => document.querySelector('[data-testid="page-info"]')?.textContent === "page 1 · 1–50",
    );
    expect(await ids()).toEqual(first);

    await page.getByTestId("state-filter").selectOption("IDLE");
    await page.waitForFunction(
      () =>
        Array.from(document.querySelectorAll('[data-testid="session-row"]')).every(
          (r) => r.getAttribute("data-state") === "IDLE",
        ) && document.querySelectorAll('[data-testid="session-row"]').length === 50,
    );
    await page.getByTestId("page-next").click();
    await page.waitForFunction(
      () => document.querySelector('[data-testid="page-info"]')?.textContent === "page 2 · 51–100",
    );
    await page.screenshot({ path: join(SCREENSHOTS, "dashboard-1000-idle.png") });
  }, 60_000);

  it("the patrol panel says no run yet, then lists recorded runs newest first with their success, change and mismatches", async () => {
    await expect.poll(() => page.getByTestId("patrol-empty").isVisible(), { timeout: 10_000 }).toBe(true);
    const reporter = createRawClient(OrchestratorService, orch.server.address, {
      token: await operatorToken(["patrol:report"]),
    });
    try {
      const run = (passed: number, finished: number, mismatches: string[]) => ({
        startedAt: { seconds: BigInt(finished - 60), nanos: 0 },
        finishedAt: { seconds: BigInt(finished), nanos: 0 },
        tasks: 100,
        passed,
        successRatio: passed / 100,
        threshold: 0.95,
        dryRun: true,
        tasksSha256: "a".repeat(64),
        mismatches: mismatches.map((taskId) => ({
          taskId,
          expected: "succeeded done",
          got: "not_done done",
          sessionId: "",
        })),
      });
      const now = Math.floor(Date.now() / 1000);
      await reporter.recordPatrolRun({ run: run(99, now - 86_400, ["question-07"]) });
      await reporter.recordPatrolRun({
        run: run(93, now, [
          "refund-small-usd-1",
          "question-07",
          "refund-risky-approved-1",
          "bad-policy",
          "refund-pending-order-1",
          "question-02",
          "refund-unknown-order",
        ]),
      });
    } finally {
      reporter.close();
    }
    const rows = page.getByTestId("patrol-row");
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(2);
    expect(await page.getByTestId("patrol-empty").isVisible()).toBe(false);
    expect(await rows.nth(0).getByTestId("patrol-success").textContent()).toBe("93.0% ✗");
    expect(await rows.nth(0).getByTestId("patrol-change").textContent()).toBe("-6.0");
    expect(await rows.nth(0).textContent()).toContain("refund-small-usd-1, question-07, refund-risky-approved-1 +4");
    expect(await rows.nth(1).getByTestId("patrol-success").textContent()).toBe("99.0%");
    expect(await rows.nth(1).getByTestId("patrol-change").textContent()).toBe("–");
    await page.getByTestId("patrol-panel").screenshot({ path: join(SCREENSHOTS, "dashboard-patrol.png") });
  });

  it("raised no script errors or content-security-policy violations", () => {
    expect(pageErrors).toEqual([]);
  });
});
