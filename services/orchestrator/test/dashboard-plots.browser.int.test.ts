/// <reference lib="dom" />
// The dashboard's trend plots in headless Chromium (playwright-core, the system's /usr/bin/chromium)
// against the harness' orchestrator, sampling every 300 ms, and the three tools as real processes.
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import { SESSION_OPERATOR_SCOPES, testToken } from "@loopguard/tool-sdk/testing";
import type { Browser, Locator, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HAVE_CHROMIUM, launchChromium } from "./chromium.js";
import { startOrchestrator, startTools, type TestOrchestrator, type Tools, waitForSession } from "./harness.js";

const SESSIONS = 4;
const SCREENSHOTS = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "test-results");

let tools: Tools;
let orch: TestOrchestrator;
let admin: RawClient<typeof OrchestratorService>;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

const adminToken = () =>
  testToken({ subject: "ops:plots", scopes: [...SESSION_OPERATOR_SCOPES, "sessions:admin"], ttlSeconds: 600 });
const plot = (name: string): Locator => page.getByTestId(`plot-${name}`);
const legend = (name: string, series: string): Locator =>
  plot(name).locator(`[data-testid="legend-item"][data-series="${series}"]`);
const points = async (l: Locator) => Number(await l.getAttribute("data-points"));

describe.skipIf(!HAVE_CHROMIUM)("the dashboard's trend plots in headless Chromium", () => {
  beforeAll(async () => {
    tools = await startTools({ inTurn: true });
    orch = await startOrchestrator(tools, { ORCHESTRATOR_SERIES_INTERVAL_MS: "300" });
    admin = createRawClient(OrchestratorService, orch.server.address, { token: await adminToken() });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1440, height: 1200 } });
    page.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error") pageErrors.push(`console: ${message.text()}`);
    });
    await page.goto(`${orch.httpUrl}/#token=${await adminToken()}`);
  }, 90_000);
  afterAll(async () => {
    admin?.close();
    await browser?.close();
    await orch?.close();
    await tools?.stop();
  });

  it("plots sessions by state, the tools' p95 and error ratio from real sessions, with axes, and keeps updating", async () => {
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const { session } = await admin.startSession({
        goal: `How long do card refunds take? (${i})`,
        scopes: ["kb:read"],
        policy: "scripted",
      });
      ids.push(session!.sessionId);
    }
    for (const id of ids) expect(SessionState[(await waitForSession(admin, id)).state]).toBe("DONE");

    // Sessions by state: the DONE line reaches the sessions that ended.
    await expect
      .poll(async () => legend("sessions", "DONE").textContent(), { timeout: 10_000 })
      .toBe(`DONE ${SESSIONS}`);
    expect(await points(legend("sessions", "DONE"))).toBeGreaterThan(1);
    expect(await plot("sessions").locator('polyline[data-series="DONE"]').count()).toBeGreaterThan(0);
    // Axes: two time labels (start and end of the window shown), three value labels from 0 up.
    expect(await plot("sessions").getByTestId("x-label").allTextContents()).toEqual([
      expect.stringMatching(/^\d\d:\d\d:\d\d/),
      expect.stringMatching(/^\d\d:\d\d:\d\d/),
    ]);
    expect((await plot("sessions").getByTestId("y-label").allTextContents()).at(-1)).toBe("0");

    // The tools: kb-search was called by every session; its p95 is a latency in ms, its error ratio 0%.
    await expect.poll(async () => points(legend("tool-p95", "kb-search")), { timeout: 10_000 }).toBeGreaterThan(0);
    expect(await legend("tool-p95", "kb-search").textContent()).toMatch(/^kb-search \d+ ms$/);
    expect(await plot("tool-p95").getByTestId("y-label").allTextContents()).toEqual([
      expect.stringMatching(/ ms$/),
      expect.stringMatching(/ ms$/),
      "0 ms",
    ]);
    expect(await legend("tool-errors", "kb-search").textContent()).toBe("kb-search 0%");
    expect(await plot("tool-errors").getByTestId("y-label").allTextContents()).toEqual(["100%", "50%", "0%"]);

    // Live: new samples keep arriving without a reload.
    const before = await points(legend("sessions", "DONE"));
    await expect.poll(async () => points(legend("sessions", "DONE")), { timeout: 10_000 }).toBeGreaterThan(before);
    mkdirSync(SCREENSHOTS, { recursive: true });
    await page.getByTestId("trends-panel").screenshot({ path: join(SCREENSHOTS, "dashboard-trends.png") });
    expect(pageErrors).toEqual([]);
  }, 60_000);

  it("says no patrol run yet until the patrol reports a run, then plots its success rate", async () => {
    expect(await plot("patrol").getByTestId("plot-empty").textContent()).toBe("no patrol run yet");
    // As `pnpm patrol` reports: RecordPatrolRun sets the orchestrator's gauge the plot samples.
    const reporter = createRawClient(OrchestratorService, orch.server.address, {
      token: await testToken({ subject: "operator", scopes: ["patrol:report"] }),
    });
    // Runs finish a minute apart: the latest run is the one that finished last, and two this test
    // sends in whole seconds could tie within one second (a tie falls to the random run id).
    let finished = BigInt(Math.floor(Date.now() / 1000)) - 600n;
    const record = async (passed: number) => {
      finished += 60n;
      await reporter.recordPatrolRun({
        run: {
          startedAt: { seconds: finished - 60n, nanos: 0 },
          finishedAt: { seconds: finished, nanos: 0 },
          tasks: 10,
          passed,
          successRatio: passed / 10,
          threshold: 0.95,
          tasksSha256: "b".repeat(64),
        },
      });
    };
    try {
      await record(8);
      await expect
        .poll(async () => legend("patrol", "golden set").textContent(), { timeout: 10_000 })
        .toBe("golden set 80%");
      expect(await plot("patrol").getByTestId("plot-empty").count()).toBe(0);
      await record(5);
      await expect
        .poll(async () => legend("patrol", "golden set").textContent(), { timeout: 10_000 })
        .toBe("golden set 50%");
    } finally {
      reporter.close();
    }
  }, 30_000);

  it("gives the sessions series only to a viewer who sees every session", async () => {
    const reader = createRawClient(OrchestratorService, orch.server.address, {
      token: await testToken({ subject: "ops:reader", scopes: ["sessions:read"] }),
    });
    try {
      const theirs = await reader.getTimeSeries({});
      expect(theirs.sessions).toEqual([]);
      expect(theirs.tools.map((t) => t.tool).sort()).toEqual(["billing", "kb-search", "risk"]);
      expect(theirs.at.length).toBe(theirs.patrolSuccessRatio.length);
      expect((await admin.getTimeSeries({})).sessions.find((s) => s.state === "DONE")?.counts.at(-1)).toBe(SESSIONS);
    } finally {
      reader.close();
    }
  });
});
