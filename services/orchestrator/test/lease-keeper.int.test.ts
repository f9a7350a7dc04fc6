// The lease renewals of one replica's runs, on a real SQLite store: a lease that ran out is counted
// lost once, however many renewals pass while its aborted run still ends (an irreversible call in
// flight is never cut off, so such a run may outlive several passes).
import { join } from "node:path";
import { tempDir } from "@loopguard/test-kit";
import { afterAll, afterEach, expect, it } from "vitest";
import { type DrivenRun, LeaseKeeper } from "../src/session/replica.js";
import { SqliteSessionStore } from "../src/store/sqlite-session-store.js";
import { newSession } from "./session-store.suite.js";

const TTL_MS = 50;
const dir = tempDir("lease-keeper");
let store: SqliteSessionStore | undefined;
afterEach(async () => {
  await store?.close();
});
afterAll(() => dir.remove());

it("counts a lease that ran out once, and renews no more the run it aborted", async () => {
  // The store's clock is the test's: a loaded machine's pauses run out no lease the test did not.
  let now = Date.now();
  store = await SqliteSessionStore.open(join(dir.dir, "orchestrator.db"), { now: () => now });
  await store.create(newSession("s1"));
  const [claimed] = await store.claim("a", TTL_MS, 10);
  const run: DrivenRun = { controller: new AbortController(), from: claimed!.version };
  const lost: string[][] = [];
  const keeper = new LeaseKeeper(store, "a", TTL_MS, new Map([["s1", run]]), (ids) => lost.push([...ids]));
  await keeper.renew();
  expect([lost, run.controller.signal.aborted]).toEqual([[], false]);
  // The replica stalled past its TTL: the lease ran out. Three passes while the aborted run is still driven.
  now += TTL_MS * 3;
  for (let pass = 0; pass < 3; pass += 1) await keeper.renew();
  expect(lost).toEqual([["s1"]]);
  expect(run.controller.signal.aborted).toBe(true);
});
