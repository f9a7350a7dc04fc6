// `pnpm settle-effect` as a real process on a real SQLite session store, with the local people's
// keys as `pnpm start` makes them: the hold of a session that ended with its refund's outcome unknown
// is settled by hand once (made: spent; not made: released), with who and why kept on it, and every
// other case is refused with one line and exit code 2, nothing written.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { repoRoot, tempDir } from "@loopguard/test-kit";
import { ensureLocalKeys } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { TraceSink } from "../src/governance/trace-sink.js";
import { SideEffectRules } from "../src/guard/side-effects.js";
import { SessionMoves } from "../src/session/moves.js";
import { outcomeOf } from "../src/session/outcome.js";
import type { Reservation } from "../src/store/effect-reservations.js";
import { openSessionStore } from "../src/store/open-store.js";
import type { SessionStore } from "../src/store/session-store.js";
import { ToolRegistry } from "../src/tool-registry.js";
import { LIMITS, reservation } from "./effect-reservations.suite.js";
import { newSession } from "./session-store.suite.js";
import { movesAt } from "./store-move.js";

const CLI = join(repoRoot, "services", "orchestrator", "dist", "cli", "settle-effect.js");
const data = tempDir("settle-effect");
const storeUrl = `sqlite:${join(data.dir, "orchestrator.db")}`;
const move = movesAt(Date.now);
const RULES = new SideEffectRules(new ToolRegistry([BillingService, RiskService]));
let store: SessionStore;

beforeAll(async () => {
  ensureLocalKeys(data.dir);
  store = await openSessionStore(storeUrl);
});

afterAll(async () => {
  await store?.close();
  data.remove();
});

function settle(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return settleOn(storeUrl, ...args);
}

function settleOn(store: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, LOOPGUARD_DATA_DIR: data.dir, ORCHESTRATOR_STORE: store }, timeout: 30_000 },
      (error, stdout, stderr) =>
        done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * A session whose refund holds `r`, left live when "live"; else ended as the orchestrator ends one
 * (SessionMoves.stop, which clears what is pending and stores the outcome): cancelled while a person
 * was asked to settle its refund's unknown outcome ("unknown"), or with the outcome known ("settled").
 */
async function holding(r: Reservation, ending: "unknown" | "settled" | "live" = "unknown"): Promise<void> {
  await store.create(newSession(r.sessionId));
  const thinking = await move(store, r.sessionId, "IDLE", "THINKING", 0);
  const call = { id: "c1", tool: r.tool, arguments: "{}", argsHash: "h", worldVersion: "w" };
  const unsettled = ending !== "settled";
  const executing = await move(store, r.sessionId, "THINKING", "TOOL_EXECUTING", thinking.version, {
    money: { reserve: r, limits: LIMITS },
    patch: { pending: { queue: [], call, unsettled } },
  });
  if (ending === "live") return;
  const approval = {
    ...{ approvalId: "a1", tool: r.tool, argumentsHash: "h", worldVersion: "w", reason: "outcome unknown" },
    ...{ expiresAt: 0, kind: "outcome_unknown" },
  };
  const asked = unsettled
    ? await move(store, r.sessionId, "TOOL_EXECUTING", "AWAITING_APPROVAL", executing.version, {
        patch: { pending: { queue: [], call, unsettled, approval } },
      })
    : executing;
  const moves = new SessionMoves({
    store,
    traces: new TraceSink(store, undefined),
    owner: "replica-a",
    now: Date.now,
    outcomeOf: (ended) => outcomeOf(ended, RULES),
  });
  await moves.stop(asked, "cancelled", "cancelled by a person", { fenced: false });
}

const held = (id: string) => store.otherEffects(reservation(id, { key: "other" }), 0);

describe("pnpm settle-effect", () => {
  it("settles a held refund of a session ended effect_unknown as made: spent, once, with who and why; a second settle is refused", async () => {
    const r = reservation("made1", { entityId: "ord_M" });
    await holding(r);
    const run = await settle("made1", "--made", "--reason", "billing ListRefunds ord_M: refund with this key");
    expect([run.code, run.stderr]).toEqual([0, ""]);
    expect(run.stdout).toMatch(
      /^settled lg-made1-refund \(45000 USD minor units on order ord_M\): made, counted as spent, by operator\n$/,
    );
    expect(await store.reservations("made1")).toEqual([
      expect.objectContaining({
        status: "settled",
        settledBy: "operator",
        settleNote: "billing ListRefunds ord_M: refund with this key",
      }),
    ]);
    const after = await held("made1");
    expect(after).toMatchObject({ entityHeld: 0, session: 45_000 });

    const again = await settle("made1", "--not-made", "--reason", "changed my mind");
    expect(again.code).toBe(2);
    expect(again.stderr).toBe(
      "settle-effect: nothing done: lg-made1-refund was settled by hand as made by operator (billing ListRefunds ord_M: refund with this key)\n",
    );
    expect(await held("made1")).toEqual(after);
  }, 30_000);

  it("settles a held refund as not made: released from the entity's, the customer's and the session's totals", async () => {
    const r = reservation("lost1", { entityId: "ord_L", customerId: "cust_L" });
    await holding(r);
    expect(
      await store.otherEffects(reservation("x", { key: "x", entityId: "ord_L", customerId: "cust_L" }), 0),
    ).toEqual({
      entityHeld: 45_000,
      customer: 45_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
    const run = await settle(
      "lost1",
      "--not-made",
      "--reason",
      "billing has no refund with this key",
      "--as",
      "operator",
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("not made, released, by operator");
    expect(
      await store.otherEffects(reservation("x", { key: "x", entityId: "ord_L", customerId: "cust_L" }), 0),
    ).toEqual({
      entityHeld: 0,
      customer: 0,
      session: 0,
      sessionAnyCurrency: 0,
    });
  }, 30_000);

  it("refuses, with one line and exit code 2 and nothing written, an unknown id, a live session, one with no outcome unknown, and bad usage", async () => {
    await holding(reservation("live1", { entityId: "ord_V" }), "live");
    await holding(reservation("known1", { entityId: "ord_K" }), "settled");
    const cases: [string[], RegExp][] = [
      [["nope", "--made", "--reason", "r"], /^settle-effect: no session nope\n$/],
      [
        ["live1", "--made", "--reason", "r"],
        /^settle-effect: session live1 is TOOL_EXECUTING, not ended: its own run settles its calls\n$/,
      ],
      [
        ["known1", "--made", "--reason", "r"],
        /^settle-effect: session known1 ended \(cancelled\) with no call whose outcome is unknown/,
      ],
      [["live1", "--made", "--not-made", "--reason", "r"], /exactly one of --made or --not-made\n$/],
      [["live1", "--made"], /--reason is required/],
      [
        ["live1", "--made", "--reason", "r", "--as", "requester"],
        /requester may not settle a reservation: its key does not carry "sessions:admin"\n$/,
      ],
      [["--made", "--reason", "r"], /settle-effect needs a session id/],
      [["live1", "--made", "--reason", "r", "--bogus"], /Unknown option '--bogus'/],
    ];
    for (const [args, message] of cases) {
      const run = await settle(...args);
      expect([run.code, run.stderr], args.join(" ")).toEqual([2, expect.stringMatching(message)]);
    }
    expect((await store.reservations("live1")).map((r) => r.status)).toEqual(["held"]);
    expect((await store.reservations("known1")).map((r) => r.status)).toEqual(["held"]);
    // A mistyped store path: refused, and no folder or empty store is left where it pointed.
    const typo = join(data.dir, "typo", "orchestratr.db");
    const run = await settleOn(`sqlite:${typo}`, "live1", "--made", "--reason", "r");
    expect([run.code, run.stderr]).toEqual([
      2,
      `settle-effect: no session store at ${typo} (ORCHESTRATOR_STORE); nothing done\n`,
    ]);
    expect(existsSync(dirname(typo))).toBe(false);
  }, 60_000);
});
