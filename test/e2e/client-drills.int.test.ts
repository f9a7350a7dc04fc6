// toolClient against real tool processes, with faults made by real SIGKILL.
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { mintToken, toolClient, type ToolResult } from "@loopguard/tool-sdk";
import { TEST_AUTH_SECRET, type ToolProcess } from "@loopguard/tool-sdk/testing";
import { Registry } from "prom-client";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { freePort, kill, startTool, tempDataDir } from "./processes.js";

const data = tempDataDir();
const running: ToolProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => kill(p)));
});
afterAll(() => data.remove());

async function token(): Promise<string> {
  return mintToken(TEST_AUTH_SECRET, { subject: "orchestrator", scopes: ["kb:read"], ttlSeconds: 600 });
}

describe("toolClient against real kb-search processes", () => {
  it("answers from cache while kb-search is killed, degrades new queries, and goes live again after restart", async () => {
    const port = await freePort();
    const first = await startTool("kb-search", data.dir, port);
    running.push(first);
    const kb = toolClient(KbSearchService, {
      target: `127.0.0.1:${port}`,
      token: await token(),
      registry: new Registry(),
      breaker: { resetTimeoutMs: 300 },
      timeoutMs: { "*": 500 },
    });
    try {
      const live = await kb.call("search", { query: "refund", limit: 3 });
      expect(live.source).toBe("live");

      await kill(first);
      await sleep(50);
      for (let i = 0; i < 5; i += 1) {
        const cached = await kb.call("search", { query: "refund", limit: 3 });
        expect(cached.source).toBe("cache");
        expect(cached.cacheAgeMs).toBeGreaterThan(0);
        expect(cached.response).toEqual(live.response);
      }
      const unseen = await kb.call("search", { query: "chargeback dispute", limit: 3 });
      expect(unseen.source).toBe("degraded");
      expect(unseen.response.hits).toEqual([]);

      const second = await startTool("kb-search", data.dir, port);
      running.push(second);
      let source = "";
      const until = Date.now() + 10_000;
      while (source !== "live" && Date.now() < until) {
        source = (await kb.call("search", { query: "chargeback dispute", limit: 3 })).source;
        if (source !== "live") await sleep(100);
      }
      expect(source).toBe("live");
    } finally {
      kb.close();
    }
  });

  it("keeps succeeding on the other replica when one of two is SIGKILLed under load", async () => {
    const a = await startTool("kb-search", data.dir);
    const b = await startTool("kb-search", data.dir);
    running.push(a, b);
    const kb = toolClient(KbSearchService, { target: [a.address, b.address], token: await token(), registry: new Registry() });
    try {
      const results: ToolResult<unknown>[] = [];
      const stopAt = Date.now() + 2000;
      const worker = async () => {
        while (Date.now() < stopAt) results.push(await kb.call("search", { query: `refund ${results.length % 7}`, limit: 2 }));
      };
      const load = Promise.all(Array.from({ length: 8 }, worker));
      await sleep(500);
      await kill(a);
      await load;
      expect(results.length).toBeGreaterThan(50);
      const notLive = results.filter((r) => r.source !== "live");
      expect(notLive.map((r) => [r.source, r.attempts, r.liveError?.code, r.liveError?.reason, r.liveError?.message])).toEqual([]);
    } finally {
      kb.close();
    }
  });
});
