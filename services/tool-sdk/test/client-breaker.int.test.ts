// toolClient's breaker against a real kb-search (SLA timeout 1000 ms, p95 target 300 ms): it opens
// for a tool that fails or is slow, never because callers gave a healthy tool too little time; and a call
// cut short or cancelled by its caller counts neither way (it neither closes a half-open breaker nor
// dilutes a hung tool's failures).
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { afterEach, expect, it } from "vitest";
import type { CallError } from "../src/client/call-error.js";
import type { ToolClientOptions } from "../src/client/plan.js";
import { toolClient } from "../src/client/tool-client.js";
import { status } from "../src/errors.js";
import { SAMPLE_HIT, startTestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A kb-search that takes `latencyMs` to answer, and a client of it with the default breaker. */
async function kbTaking(latencyMs: number, overrides: Partial<ToolClientOptions> = {}) {
  const tool = await startTestTool({
    service: KbSearchService,
    handlers: {
      search: async (_req, ctx) => {
        await sleep(latencyMs, undefined, { signal: ctx.signal }).catch(() => undefined);
        return { hits: [SAMPLE_HIT] };
      },
    },
  });
  cleanups.push(() => tool.close());
  const token = await testToken({ subject: "orchestrator", scopes: ["kb:read"] });
  const client = toolClient(KbSearchService, {
    target: tool.address,
    token,
    registry: new Registry(),
    random: () => 1,
    hedge: { enabled: false },
    ...overrides,
  });
  cleanups.push(() => client.close());
  return client;
}

const live = { fallback: false, degraded: false } as const;
const errorOf = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as CallError,
  );

it("stays closed when callers' own short deadlines end calls to a healthy tool", async () => {
  const client = await kbTaking(30);
  await client.call("search", { query: "warm", limit: 1 });
  // Sessions near the end of their wall clock: each call carries the little time its session has left.
  const nearlyDone = await Promise.all(
    Array.from({ length: 6 }, (_, i) =>
      errorOf(client.call("search", { query: `late-${i}`, limit: 1 }, { deadline: new Date(Date.now() + 5), ...live })),
    ),
  );
  expect(nearlyDone.map((e) => e?.code)).toEqual(Array(6).fill(status.DEADLINE_EXCEEDED));
  expect(client.breakerState).toBe("closed");
  // Any other session, with time enough, reaches the healthy tool.
  const healthy = await client.call("search", { query: "healthy session", limit: 1 }, live);
  expect(healthy.source).toBe("live");
});

it("opens for a slow tool: a timeout of a call that had the whole SLA timeout counts", async () => {
  const client = await kbTaking(5_000, { timeoutMs: { "*": 200 } });
  const timedOut = await Promise.all(
    Array.from({ length: 5 }, (_, i) => errorOf(client.call("search", { query: `q${i}`, limit: 1 }, live))),
  );
  expect(timedOut.map((e) => e?.code)).toEqual(Array(5).fill(status.DEADLINE_EXCEEDED));
  expect(client.breakerState).toBe("open");
  const refused = await errorOf(client.call("search", { query: "next", limit: 1 }, live));
  expect([refused?.code, refused?.reason]).toEqual([status.UNAVAILABLE, "BREAKER_OPEN"]);
});

it("opens for a slow tool when callers pass the SLA timeout as their own deadline, read a little before the call", async () => {
  const client = await kbTaking(5_000);
  // As the orchestrator does (session/send.ts): deadline = now + the SLA timeout, then a session
  // token is fetched, then the call is made.
  const asTheOrchestrator = async (i: number) => {
    const deadline = Date.now() + 1000;
    await sleep(20);
    return errorOf(client.call("search", { query: `q${i}`, limit: 1 }, { deadline: new Date(deadline), ...live }));
  };
  const timedOut = await Promise.all(Array.from({ length: 5 }, (_, i) => asTheOrchestrator(i)));
  expect(timedOut.map((e) => e?.code)).toEqual(Array(5).fill(status.DEADLINE_EXCEEDED));
  expect(client.breakerState).toBe("open");
});

/** A kb-search that never answers within 200 ms, its client's breaker opened by five calls that had the whole timeout, now half-open. */
async function halfOpenOnHungTool() {
  const client = await kbTaking(5_000, { timeoutMs: { "*": 200 }, breaker: { resetTimeoutMs: 300 } });
  await Promise.all(
    Array.from({ length: 5 }, (_, i) => errorOf(client.call("search", { query: `q${i}`, limit: 1 }, live))),
  );
  expect(client.breakerState).toBe("open");
  await sleep(350);
  expect(client.breakerState).toBe("half-open");
  return client;
}

it("stays open when the half-open probe is cut short by its caller's deadline: the tool has not answered", async () => {
  const client = await halfOpenOnHungTool();
  // The probe: a session with 20 ms of wall clock left.
  const probe = await errorOf(
    client.call("search", { query: "probe", limit: 1 }, { deadline: new Date(Date.now() + 20), ...live }),
  );
  expect(probe?.code).toBe(status.DEADLINE_EXCEEDED);
  expect(client.breakerState).toBe("open");
  const next = await errorOf(client.call("search", { query: "next", limit: 1 }, live));
  expect([next?.code, next?.reason]).toEqual([status.UNAVAILABLE, "BREAKER_OPEN"]);
});

it("stays open when the half-open probe is cancelled (a session cancelled, a lease lost)", async () => {
  const client = await halfOpenOnHungTool();
  const probe = await errorOf(
    client.call("search", { query: "probe", limit: 1 }, { signal: AbortSignal.timeout(20), ...live }),
  );
  expect(probe?.code).toBe(status.CANCELLED);
  expect(client.breakerState).toBe("open");
});

it("opens for a hung tool however many calls their callers cut short beside those given the whole timeout", async () => {
  const client = await kbTaking(5_000, { timeoutMs: { "*": 200 } });
  const results = await Promise.all([
    ...Array.from({ length: 5 }, (_, i) => errorOf(client.call("search", { query: `full${i}`, limit: 1 }, live))),
    ...Array.from({ length: 20 }, (_, i) =>
      errorOf(
        client.call("search", { query: `short${i}`, limit: 1 }, { deadline: new Date(Date.now() + 20), ...live }),
      ),
    ),
  ]);
  expect(results.every((e) => e?.code === status.DEADLINE_EXCEEDED)).toBe(true);
  expect(client.breakerState).toBe("open");
});
