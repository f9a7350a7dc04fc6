// A session's Search hedged across kb-search replicas (real processes, one slowed through
// SetFaults): the hedged answer is the session's one tool call, validated and cited as usual, and
// its extra attempt shows in the step's attempts.
import { join } from "node:path";
import { kill } from "@loopguard/test-kit";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { startTool, testToken } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { ALL_SCOPES, useSuite, waitForSession } from "./harness.js";

const SLOW_MS = 3000;

const suite = useSuite({
  orchestrator: async (tools) => {
    const extra = await Promise.all([1, 2].map((n) => startTool("kb-search", join(tools.dataDir, `kb-${n}`))));
    suite.onCleanUp(() => Promise.all(extra.map((p) => kill(p))));
    return { KB_SEARCH_ADDR: [tools.kb, ...extra].map((r) => r.address).join(",") };
  },
});

async function question(goal: string) {
  const { session } = await suite.orch.api.startSession({ goal, task: {}, scopes: ALL_SCOPES, policy: "scripted" });
  const done = await waitForSession(suite.orch.api, session!.sessionId);
  const steps = (await suite.orch.api.getTrace({ sessionId: session!.sessionId })).records
    .map(
      (r) =>
        JSON.parse(r) as {
          decision: { kind: string };
          attempt?: number;
          result: { ok?: boolean; refs?: unknown[] } | null;
        },
    )
    .filter((r) => r.decision.kind === "tool_call");
  return { done, steps };
}

describe("hedged reads in sessions", () => {
  it("a Search answered by a hedge is one tool call of the session, with two attempts, and the answer cites what it found", async () => {
    // Each replica answers once first, so the client knows there are others to hedge to.
    for (let i = 0; i < 3; i++)
      expect((await question(`How long do card refunds take? ${i}`)).done.stopReason).toBe("done");
    const admin = createRawClient(ToolAdminService, suite.tools.kb.address, {
      token: await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] }),
    });
    await admin.setFaults({ profile: { addedLatencyMs: SLOW_MS } });
    admin.close();
    const sessions = [];
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      sessions.push({ ...(await question(`What cannot be returned? ${i}`)), ms: Date.now() - started });
    }
    // Round robin sends one of three Searches to the slowed replica first: that one is hedged.
    const hedged = sessions.filter((s) => s.steps[0]?.attempt === 2);
    expect(hedged.length).toBeGreaterThanOrEqual(1);
    for (const s of sessions) {
      expect(s.done.stopReason).toBe("done");
      expect(s.done.usage?.toolCalls).toBe(1);
      expect(s.steps).toHaveLength(1);
      expect(s.steps[0]?.result?.ok).toBe(true);
      expect(s.done.answer).toMatch(/\[[a-z0-9-]+@\d+\]/);
      expect(s.ms).toBeLessThan(SLOW_MS);
    }
  });
});
