// GetTrace serves each step record masked by today's rules, not only as it was stored: a record
// written before a masking rule existed (here: one whose phone number and token a store edit put
// back in the clear, as an older build would have left them) is masked when it is read.
import { join } from "node:path";
import Database from "better-sqlite3";
import { expect, it } from "vitest";
import { useSuite, waitForSession } from "./harness.js";

const suite = useSuite();

it("masks a stored step record's phone number and token as it serves it", async () => {
  const { session } = await suite.orch.api.startSession({
    goal: "How long do card refunds take?",
    scopes: ["kb:read"],
  });
  const id = session!.sessionId;
  await waitForSession(suite.orch.api, id);
  const db = new Database(join(suite.orch.dataDir, "orchestrator.db"));
  try {
    const { payload } = db
      .prepare("SELECT payload FROM session_steps WHERE session_id = ? ORDER BY step LIMIT 1")
      .get(id) as {
      payload: string;
    };
    const old = {
      ...JSON.parse(payload),
      note: "call 13912345678, Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl",
    };
    db.prepare("UPDATE session_steps SET payload = ? WHERE session_id = ? AND step = ?").run(
      JSON.stringify(old),
      id,
      old.step,
    );
  } finally {
    db.close();
  }
  const { records } = await suite.orch.api.getTrace({ sessionId: id });
  const served = records.join("\n");
  expect(served).toContain('"note":"call ');
  expect(served).not.toContain("13912345678");
  expect(served).not.toContain("eyJzdWIiOiJ4In0");
});
