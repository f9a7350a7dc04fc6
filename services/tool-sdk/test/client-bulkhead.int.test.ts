// toolClient's bulkhead against a real kb-search: a call waiting for a slot waits no longer than
// its caller does (docs/tool-sdk.md, "Bulkhead").
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { afterEach, expect, it } from "vitest";
import type { CallError } from "../src/client/call-error.js";
import { toolClient } from "../src/client/tool-client.js";
import { status } from "../src/errors.js";
import { SAMPLE_HIT, startTestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const HOLD_MS = 1500;

/** One slot and one place in the queue; a "slow" query holds the slot for HOLD_MS. */
async function oneSlotKb() {
  const seen: string[] = [];
  const tool = await startTestTool({
    service: KbSearchService,
    handlers: {
      search: async (req) => {
        seen.push(req.query);
        if (req.query === "slow") await sleep(HOLD_MS);
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
    bulkhead: { maxInFlight: 1, maxQueue: 1 },
    timeoutMs: { "*": 10_000 },
  });
  cleanups.push(() => client.close());
  return { client, seen };
}

/** How a call ended, and how long after it was made. */
async function timed<T>(p: Promise<T>) {
  const started = performance.now();
  try {
    const value = await p;
    return { ms: performance.now() - started, value, error: undefined };
  } catch (error) {
    return { ms: performance.now() - started, value: undefined, error: error as CallError };
  }
}

const live = { fallback: false, degraded: false } as const;

it("ends a call queued behind the bulkhead at its caller's deadline, not when the slot frees", async () => {
  const { client, seen } = await oneSlotKb();
  const holder = client.call("search", { query: "slow", limit: 1 });
  await sleep(50);
  const queued = await timed(
    client.call("search", { query: "session-B", limit: 1 }, { deadline: new Date(Date.now() + 200), ...live }),
  );
  expect(queued.ms).toBeLessThan(HOLD_MS / 2);
  expect([queued.error?.code, queued.error?.reason, queued.error?.attempts]).toEqual([
    status.DEADLINE_EXCEEDED,
    "DEADLINE_PASSED",
    0,
  ]);
  await holder;
  expect(seen).toEqual(["slow"]);
});

it("takes a cancelled call out of the queue at once, and its place goes to another session", async () => {
  const { client, seen } = await oneSlotKb();
  const holder = client.call("search", { query: "slow", limit: 1 });
  await sleep(50);
  const cancel = new AbortController();
  const cancelled = timed(client.call("search", { query: "session-A", limit: 1 }, { signal: cancel.signal, ...live }));
  await sleep(50);
  cancel.abort();
  const a = await cancelled;
  expect(a.ms).toBeLessThan(HOLD_MS / 2);
  expect([a.error?.code, a.error?.reason, a.error?.attempts]).toEqual([status.CANCELLED, "CALL_CANCELLED", 0]);
  // Session C asks while the slot is still held, and is willing to wait for it.
  const other = await timed(client.call("search", { query: "session-C", limit: 1 }, live));
  expect(other.error).toBeUndefined();
  expect(other.value?.source).toBe("live");
  await holder;
  expect(seen).toEqual(["slow", "session-C"]);
});
