// Graceful shutdown of a real tool process: SIGTERM with calls in flight.
import { kill, refusal, tempDir } from "@loopguard/test-kit";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";
import { checkHealth, startTool, testToken } from "@loopguard/tool-sdk/testing";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";

const data = tempDir("e2e");
afterAll(() => data.remove());

describe("kb-search process lifecycle", () => {
  it("on SIGTERM reports NOT_SERVING, finishes calls in flight, refuses new ones and exits 0 within the bound", async () => {
    const proc = await startTool("kb-search", data.dir, 0, { KB_SEARCH_SHUTDOWN_GRACE_MS: "5000" });
    try {
      const token = await testToken({ subject: "test", scopes: ["kb:read", "tool:admin"] });
      const kb = createRawClient(KbSearchService, proc.address, { token });
      const admin = createRawClient(ToolAdminService, proc.address, { token });
      expect(await checkHealth(proc.address)).toBe("SERVING");
      await admin.setFaults({ profile: { addedLatencyMs: 800 } });

      const inFlight = Array.from({ length: 5 }, () => kb.search({ query: "refund", limit: 2 }));
      await sleep(200);
      const signalledAt = Date.now();
      proc.child.kill("SIGTERM");
      await sleep(100);
      expect(await checkHealth(proc.address)).toBe("NOT_SERVING");
      const refused = await refusal(kb.search({ query: "refund", limit: 2 }), CallError);
      expect(refused.code).toBe(status.UNAVAILABLE);

      const answers = await Promise.all(inFlight);
      for (const a of answers) expect(a.hits[0]?.docId).toBe("refund-policy");
      expect(await proc.exited).toBe(0);
      expect(Date.now() - signalledAt).toBeLessThan(5000);
      kb.close();
      admin.close();
    } finally {
      await kill(proc);
    }
  });
});
