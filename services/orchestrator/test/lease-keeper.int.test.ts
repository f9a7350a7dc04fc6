import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LeaseKeeper } from "../src/session/replica.js";
import { openSessionStore } from "../src/store/open-store.js";
import { newSession } from "./session-store.suite.js";
import { movesAt } from "./store-move.js";

const TTL_MS = 5000;

describe("lease renewals", () => {
  it("count as lost only the leases that ran out, not those a session's own last move let go while its run was finishing, whatever came after", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-lease-"));
    let clock = Date.parse("2026-12-04T12:00:00Z");
    const now = () => clock;
    const store = await openSessionStore(`sqlite:${join(dir, "sessions.db")}`, { now });
    const move = movesAt(now);
    const endBy = (owner: string, id: string) =>
      move(store, id, "IDLE", "DONE", 0, {
        owner,
        via: [{ state: "THINKING", audit: { at: now() } }],
        patch: { stopReason: "done", answer: "done" },
      });
    const lease = { owner: "replica-a", ttlMs: TTL_MS };
    try {
      // Three leases run out (a stall); another replica takes two of them, and finishes one.
      for (const id of ["taken", "finished-elsewhere", "ran-out"]) {
        await store.create(newSession(id, { lease }));
        clock += 1;
      }
      // Let go for a human, who approves at once; another replica claims it before the renewal reads it.
      await store.create(newSession("approved-elsewhere", { lease }));
      await move(store, "approved-elsewhere", "IDLE", "THINKING", 0, { owner: "replica-a" });
      await move(store, "approved-elsewhere", "THINKING", "AWAITING_APPROVAL", 1, { owner: "replica-a" });
      await move(store, "approved-elsewhere", "AWAITING_APPROVAL", "TOOL_EXECUTING", 2, {});
      expect((await store.claim("replica-b", TTL_MS, 10)).map((s) => s.id)).toEqual(["approved-elsewhere"]);
      // Let go for a human the same way, approved, then claimed by this replica again: its run begins
      // at version 3, and that lease runs out too. The move that let it go before is no alibi.
      await store.create(newSession("approved-then-ran-out", { lease }));
      await move(store, "approved-then-ran-out", "IDLE", "THINKING", 0, { owner: "replica-a" });
      await move(store, "approved-then-ran-out", "THINKING", "AWAITING_APPROVAL", 1, { owner: "replica-a" });
      await move(store, "approved-then-ran-out", "AWAITING_APPROVAL", "TOOL_EXECUTING", 2, {});
      expect((await store.claim("replica-a", TTL_MS, 10)).map((s) => [s.id, s.version])).toEqual([
        ["approved-then-ran-out", 3],
      ]);
      clock += TTL_MS;
      expect((await store.claim("replica-b", TTL_MS, 2)).map((s) => s.id)).toEqual(["taken", "finished-elsewhere"]);
      await endBy("replica-b", "finished-elsewhere");
      // Fresh leases: one still running, and three whose last move let the lease go just now.
      for (const id of ["running", "ended", "asks-human", "parked"]) await store.create(newSession(id, { lease }));
      await endBy("replica-a", "ended");
      await move(store, "asks-human", "IDLE", "THINKING", 0, { owner: "replica-a" });
      await move(store, "asks-human", "THINKING", "AWAITING_APPROVAL", 1, { owner: "replica-a" });
      await move(store, "parked", "IDLE", "THINKING", 0, { owner: "replica-a" });
      await move(store, "parked", "THINKING", "TOOL_EXECUTING", 1, { owner: "replica-a" });
      await move(store, "parked", "TOOL_EXECUTING", "PARKED", 2, { owner: "replica-a" });

      // Every run still in the replica's map, as between a run's last commit and its end. Every run
      // began from the session as created (version 0), but the one claimed again after its approval.
      const driven = new Map(
        [
          "taken",
          "finished-elsewhere",
          "ran-out",
          "running",
          "ended",
          "asks-human",
          "approved-elsewhere",
          "approved-then-ran-out",
          "parked",
        ].map((id) => [id, { controller: new AbortController(), from: id === "approved-then-ran-out" ? 3 : 0 }]),
      );
      const lost: string[][] = [];
      await new LeaseKeeper(store, "replica-a", TTL_MS, driven, (ids) => lost.push([...ids])).renew();

      expect(lost).toEqual([["taken", "finished-elsewhere", "ran-out", "approved-then-ran-out"]]);
      const aborted = [...driven].filter(([, run]) => run.controller.signal.aborted).map(([id]) => id);
      expect(aborted).toEqual([
        "taken",
        "finished-elsewhere",
        "ran-out",
        "ended",
        "asks-human",
        "approved-elsewhere",
        "approved-then-ran-out",
        "parked",
      ]);
      expect((await store.get("running"))?.leaseExpiresAt).toBe(clock + TTL_MS);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
