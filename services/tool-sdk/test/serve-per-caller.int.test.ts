// serveTool's unary slots shared between callers, over loopback: one caller (one token subject)
// holding calls open cannot take every slot of a server and leave the others shed.
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterEach, expect, it } from "vitest";
import type { CallError } from "../src/client/call-error.js";
import { status } from "../src/errors.js";
import { SAMPLE_HIT, startTestTool, type TestTool } from "../testing/index.js";

let tool: TestTool<typeof KbSearchService> | undefined;
afterEach(async () => {
  await tool?.close();
  tool = undefined;
});

/** A kb-search whose searches for "hold" wait until released; any other answers at once. */
async function kbHolding(options: { maxConcurrent: number; maxConcurrentPerCaller?: number }) {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  tool = await startTestTool(
    {
      service: KbSearchService,
      handlers: {
        search: async (req) => {
          if (req.query === "hold") await held;
          return { hits: [SAMPLE_HIT] };
        },
      },
    },
    { shedRetryAfterMs: 250, ...options },
  );
  return { tool, release };
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => "ok",
    (e: CallError) => e,
  );

async function waitFor(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
}

it("keeps half the slots from one caller by default: another caller is still served, the first refused with OVERLOADED naming its limit", async () => {
  const { tool: t, release } = await kbHolding({ maxConcurrent: 4 });
  const greedy = await t.client(["kb:read"], "alice");
  const other = await t.client(["kb:read"], "bob");
  const flood = Array.from({ length: 4 }, () => outcome(greedy.search({ query: "hold", limit: 1 })));
  await waitFor(() => t.server.inFlight() >= 2);
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(await outcome(other.search({ query: "served", limit: 1 }, { deadline: 1000 }))).toBe("ok");
  const refused = (await Promise.race([
    ...flood,
    new Promise((resolve) => setTimeout(() => resolve("none refused"), 100)),
  ])) as CallError;
  expect([refused.code, refused.reason, refused.retryAfterMs]).toEqual([status.RESOURCE_EXHAUSTED, "OVERLOADED", 250]);
  expect(refused.message).toContain("alice has 2 calls in flight");
  release();
  const results = await Promise.all(flood);
  expect(results.filter((r) => r === "ok")).toHaveLength(2);
});

it("takes its per-caller limit from the options, and frees a caller's slot when its call ends", async () => {
  const { tool: t, release } = await kbHolding({ maxConcurrent: 4, maxConcurrentPerCaller: 1 });
  const caller = await t.client(["kb:read"], "alice");
  const first = outcome(caller.search({ query: "hold", limit: 1 }));
  await waitFor(() => t.server.inFlight() >= 1);
  const second = await outcome(caller.search({ query: "next", limit: 1 }));
  expect((second as CallError).code).toBe(status.RESOURCE_EXHAUSTED);
  release();
  expect(await first).toBe("ok");
  expect(await outcome(caller.search({ query: "next", limit: 1 }))).toBe("ok");
});
