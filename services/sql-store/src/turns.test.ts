import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Turns } from "./turns.js";

describe("Turns", () => {
  it("runs work under one key one at a time in arrival order, past failures, while another key runs alongside; then forgets the key", async () => {
    const turns = new Turns<string>();
    const log: string[] = [];
    const job =
      (name: string, ms: number, fail = false) =>
      async () => {
        log.push(`${name}+`);
        await sleep(ms);
        log.push(`${name}-`);
        if (fail) throw new Error(name);
        return name;
      };
    const results = await Promise.allSettled([
      turns.take("a", job("a1", 30, true)),
      turns.take("a", job("a2", 10)),
      turns.take("b", job("b1", 5)),
    ]);
    expect(results.map((r) => (r.status === "fulfilled" ? r.value : (r.reason as Error).message))).toEqual([
      "a1",
      "a2",
      "b1",
    ]);
    expect(log).toEqual(["a1+", "b1+", "b1-", "a1-", "a2+", "a2-"]);
    expect(turns.size).toBe(0);
  });

  it("takes each key's turn in the order given: work on a then b waits for a's earlier holder, then holds b from a later taker; with no keys it runs at once", async () => {
    const turns = new Turns<string>();
    const log: string[] = [];
    const hold = (name: string, ms: number) => async () => {
      log.push(`${name}+`);
      await sleep(ms);
      log.push(`${name}-`);
    };
    const first = turns.take("a", hold("on a", 20));
    const both = turns.takeEach(["a", "b"], hold("on a and b", 30));
    await turns.takeEach([], hold("on none", 1));
    while (!log.includes("on a and b+")) await sleep(1);
    await Promise.all([first, both, turns.take("b", hold("on b", 5))]);
    expect(log).toEqual(["on none+", "on a+", "on none-", "on a-", "on a and b+", "on a and b-", "on b+", "on b-"]);
    expect(turns.size).toBe(0);
  });

  it("with a shared failure, the turns waiting behind the one that failed fail with it without running; other failures do not spread, and work that comes afterwards runs", async () => {
    const down = new Error("the database is down");
    const turns = new Turns<string>({ sharedFailure: (e) => e === down });
    const ran: string[] = [];
    const job = (name: string, error?: Error) => async () => {
      ran.push(name);
      await sleep(5);
      if (error) throw error;
      return name;
    };
    const outcome = (p: Promise<string>) =>
      p.then(
        (v) => v,
        (e: Error) => `failed: ${e.message}`,
      );
    const queue = [
      outcome(turns.take("a", job("own fault", new Error("own fault")))),
      outcome(turns.take("a", job("after a fault of its own"))),
      outcome(turns.take("a", job("finds the outage", down))),
      outcome(turns.take("a", job("waiting 1"))),
      outcome(turns.takeEach(["a", "b"], job("waiting on a and b"))),
      outcome(turns.take("b", job("on b alone"))),
    ];
    expect(await Promise.all(queue)).toEqual([
      "failed: own fault",
      "after a fault of its own",
      "failed: the database is down",
      "failed: the database is down",
      "failed: the database is down",
      "on b alone",
    ]);
    expect(ran).toEqual(["own fault", "on b alone", "after a fault of its own", "finds the outage"]);
    expect(turns.size).toBe(0);
    expect(await turns.take("a", job("afterwards"))).toBe("afterwards");
  });

  it("does not run work whose signal aborted while it waited: it fails with the reason, and the turns behind it run", async () => {
    const turns = new Turns<string>();
    const ran: string[] = [];
    const job = (name: string) => async () => {
      ran.push(name);
      await sleep(5);
      return name;
    };
    const caller = new AbortController();
    const queue = [
      turns.take("a", job("first"), caller.signal),
      turns.take("a", job("given up"), caller.signal).catch((e: Error) => `failed: ${e.message}`),
      turns.take("a", job("third")),
    ];
    await sleep(1);
    caller.abort(new Error("the caller gave up"));
    expect(await Promise.all(queue)).toEqual(["first", "failed: the caller gave up", "third"]);
    expect(ran).toEqual(["first", "third"]);
  });
});
