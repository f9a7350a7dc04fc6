// A run whose move fails because the session moved on reads the session again and goes on only while
// it is still its own. One that another replica took over meanwhile (this replica's lease ran out,
// in a long pause or while the model answered slowly) is that replica's to drive: this run neither
// asks the model again nor calls a tool for it. A real orchestrator in process on SQLite, real tools;
// the other replica's takeover is its write to the same database, made while this replica waits
// on the model.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import type { Decision, Policy } from "../src/policies/policy.js";
import { startSession } from "./guard-read-fixture.js";
import { useSuite, waitForSession } from "./harness.js";

const suite = useSuite({ orchestrator: false });

describe("a run whose session another replica took over", () => {
  it("stops at its next read of the session: the model is not asked again and the session is left to its new owner", async () => {
    let dataDir = "";
    const asked: number[] = [];
    let takenOver = false;
    // The model's first decision is a search; while it decides the second, replica-b takes the
    // session over (a newer version, its lease), once.
    const model: Policy = {
      name: "openai",
      async decide(input) {
        asked.push(input.step);
        if (input.step === 1)
          return {
            kind: "tool_calls",
            calls: [{ id: "s1", name: "kb_search_search", arguments: '{"query":"refund policy","limit":1}' }],
            usage: { input: 1, output: 1 },
            promptHash: "",
          } as Decision;
        if (!takenOver) {
          takenOver = true;
          const db = new Database(join(dataDir, "orchestrator.db"));
          try {
            db.prepare(
              "UPDATE sessions SET version = version + 1, lease_owner = 'replica-b', lease_expires_at = ? WHERE state = 'THINKING'",
            ).run(Date.now() + 60_000);
          } finally {
            db.close();
          }
        }
        return {
          kind: "final",
          answer: "Refunds take 5 days.",
          usage: { input: 1, output: 1 },
          promptHash: "",
        } as Decision;
      },
    };
    const orch = await suite.startOrchestrator({}, { policies: [model] });
    dataDir = orch.dataDir;
    const id = await startSession(orch, { kind: "question" });
    await waitForSession(orch.api, id, () => takenOver);
    // Long enough for this replica's run to read the session again, and to ask the model again if it went on.
    await sleep(1000);
    expect(asked).toEqual([1, 2]);
    const db = new Database(join(dataDir, "orchestrator.db"), { readonly: true });
    try {
      expect(db.prepare("SELECT state, lease_owner FROM sessions WHERE id = ?").get(id)).toEqual({
        state: "THINKING",
        lease_owner: "replica-b",
      });
    } finally {
      db.close();
    }
    const { session } = await orch.api.getSession({ sessionId: id });
    expect(session!.state).toBe(SessionState.THINKING);
    await orch.api.cancelSession({ sessionId: id, reason: "test over" });
  });
});
