// How a real server counts calls that end at their deadline (grpc_server_handled_total): a tool that
// hangs past a deadline that left it its latency objective failed, every time; a call whose caller
// left it less than that objective ended by the caller's doing, not the tool's fault. The caller
// sees DEADLINE_EXCEEDED either way.
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterEach, expect, it } from "vitest";
import { CallError, status } from "../src/index.js";
import { metricValue, startTestTool, type TestTool } from "../testing/index.js";

// kb-search Search's SLA in its contract: p95_target_ms 300, timeout_ms 1000.
const OBJECTIVE_MS = 300;

let tool: TestTool<typeof KbSearchService> | undefined;
let release: () => void = () => undefined;
afterEach(async () => {
  release();
  await tool?.close();
  tool = undefined;
});

/** A Search that hangs, ignoring its signal as a stuck handler does, until the test ends; a "warm-up" is answered. */
async function hungTool(): Promise<TestTool<typeof KbSearchService>> {
  const stuck = new Promise<void>((resolve) => {
    release = resolve;
  });
  tool = await startTestTool({
    service: KbSearchService,
    handlers: {
      search: async ({ query }) => {
        if (query !== "warm-up") await stuck;
        return { hits: [] };
      },
    },
  });
  return tool;
}

/**
 * Sends `rounds` batches of `perRound` concurrent Searches with a deadline `deadlineMs` away; the codes
 * the caller saw. A first call, answered, opens the connection: its setup would eat into the first deadlines.
 */
async function searches(t: TestTool<typeof KbSearchService>, deadlineMs: number, rounds: number, perRound: number) {
  const client = await t.client(["kb:read"]);
  await client.search({ query: "warm-up", limit: 1 });
  const codes: number[] = [];
  for (let round = 0; round < rounds; round++) {
    await Promise.all(
      Array.from({ length: perRound }, () =>
        client.search({ query: "refund", limit: 1 }, { deadline: deadlineMs }).then(
          () => codes.push(status.OK),
          (error: unknown) => codes.push(error instanceof CallError ? error.code : -1),
        ),
      ),
    );
  }
  return codes;
}

/** grpc_server_handled_total of Search by code, once `n` calls are counted (the server counts a call as its signal aborts). */
async function handledByCode(t: TestTool<typeof KbSearchService>, n: number): Promise<Record<string, number>> {
  const page = async (): Promise<Record<string, number>> => {
    const text = await t.server.metrics.registry.metrics();
    const counted = Object.keys(status)
      .filter((name) => Number.isNaN(Number(name)))
      .map((name): [string, number] => [
        name,
        metricValue(text, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: name }),
      ]);
    return Object.fromEntries(counted.filter(([, value]) => value !== 0));
  };
  // Polled, not waited for: a loaded machine may take seconds to count the last of them.
  await expect
    .poll(async () => Object.values(await page()).reduce((sum, v) => sum + v, 0), { timeout: 10_000 })
    .toBe(n);
  return page();
}

it("counts every call of a hung tool whose deadline covered the objective DEADLINE_EXCEEDED, never CANCELLED", async () => {
  const t = await hungTool();
  const n = 4 * 8;
  const codes = await searches(t, 2 * OBJECTIVE_MS, 4, 8);
  expect(codes).toEqual(Array.from({ length: n }, () => status.DEADLINE_EXCEEDED));
  expect(await handledByCode(t, n + 1)).toEqual({ OK: 1, DEADLINE_EXCEEDED: n });
});

it("counts calls whose deadline left less than the objective and expired as the caller's (CANCELLED), not a fault", async () => {
  const t = await hungTool();
  const n = 4 * 8;
  const codes = await searches(t, OBJECTIVE_MS / 3, 4, 8);
  // What the caller receives does not change.
  expect(codes).toEqual(Array.from({ length: n }, () => status.DEADLINE_EXCEEDED));
  expect(await handledByCode(t, n + 1)).toEqual({ OK: 1, CANCELLED: n });
  // Those the deadline ended (not the caller's cancel, which can come first) say why in the log.
  const noted = t.logs.filter((line) => line.reason === "DEADLINE_TOO_SHORT");
  expect(noted.length).toBeGreaterThan(0);
  expect(noted[0]).toMatchObject({ grpc_code: "CANCELLED", objective_ms: OBJECTIVE_MS });
});

it("still counts a healthy call as OK whatever its deadline", async () => {
  tool = await startTestTool({ service: KbSearchService, handlers: { search: async () => ({ hits: [] }) } });
  const codes = await searches(tool, OBJECTIVE_MS - 50, 1, 4);
  expect(codes).toEqual([status.OK, status.OK, status.OK, status.OK]);
  expect(await handledByCode(tool, 5)).toEqual({ OK: 5 });
});
