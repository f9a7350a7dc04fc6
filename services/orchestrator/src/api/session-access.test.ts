import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { servicePolicy } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import {
  accessTo,
  actionable,
  APPROVER_SCOPE,
  readable,
  readerOf,
  SESSIONS_ADMIN_SCOPE,
  viewerOf,
  whileWaiting,
} from "./session-access.js";
import type { WatchEvent } from "../session/watch.js";
import type { SessionRecord } from "../store/session-store.js";
import type { SessionState } from "../session/session-state.js";

const session = (state: SessionState, createdBy = "alice") => ({ id: "ses_1", state, createdBy });

const viewer = (subject: string, ...scopes: string[]) =>
  viewerOf({ subject, role: "person", keyId: "test", scopes: new Set(["sessions:read", "sessions:write", ...scopes]) });

describe("session access", () => {
  it("reads its scopes from the contract: sessions:admin is an operator scope, approvals:write is ResolveApproval's", () => {
    expect(servicePolicy(OrchestratorService).operatorScopes).toContain(SESSIONS_ADMIN_SCOPE);
    expect(APPROVER_SCOPE).toBe("approvals:write");
  });

  it("lets the creator and sessions:admin act on a session in any state", () => {
    for (const state of ["THINKING", "AWAITING_APPROVAL", "DONE"] as const) {
      expect(accessTo(viewer("alice"), session(state))).toBe("act");
      expect(accessTo(viewer("ops", SESSIONS_ADMIN_SCOPE), session(state))).toBe("act");
    }
  });

  it("lets approvals:write read another's session only while it waits for an approval, and never act on it", () => {
    const approver = viewer("bob", APPROVER_SCOPE);
    expect(accessTo(approver, session("AWAITING_APPROVAL"))).toBe("read");
    expect(readable(approver, session("AWAITING_APPROVAL")).id).toBe("ses_1");
    expect(() => actionable(approver, session("AWAITING_APPROVAL"))).toThrow(
      expect.objectContaining({ reason: "NOT_SESSION_OWNER" }),
    );
    for (const state of ["THINKING", "TOOL_EXECUTING", "DONE", "CANCELLED"] as const) {
      expect(() => readable(approver, session(state))).toThrow(
        expect.objectContaining({ reason: "SESSION_NOT_FOUND", message: "no session ses_1" }),
      );
      expect(() => actionable(approver, session(state))).toThrow(
        expect.objectContaining({ reason: "SESSION_NOT_FOUND" }),
      );
    }
  });

  it("hides another's session from a caller with neither scope, whatever its state", () => {
    for (const state of ["IDLE", "AWAITING_APPROVAL", "DONE"] as const)
      expect(accessTo(viewer("mallory"), session(state))).toBe("none");
  });

  it("filters lists to the caller's own sessions, plus every waiting one for an approver, and nothing for sessions:admin", () => {
    expect(readerOf(viewer("alice"))).toEqual({ createdBy: "alice", waiting: false });
    expect(readerOf(viewer("bob", APPROVER_SCOPE))).toEqual({ createdBy: "bob", waiting: true });
    expect(readerOf(viewer("ops", SESSIONS_ADMIN_SCOPE, APPROVER_SCOPE))).toBeUndefined();
  });
});

describe("an approver's watch", () => {
  const waitingSince = 1_000;
  const s = { id: "ses_1", state: "AWAITING_APPROVAL", version: 5, updatedAt: waitingSince } as SessionRecord;
  const step = (n: number, at: number): WatchEvent => ({ kind: "step", step: { step: n, at, payload: {} } });
  const transition = (version: number): WatchEvent =>
    ({ kind: "transition", audit: { version } }) as unknown as WatchEvent;

  async function seen(events: WatchEvent[]): Promise<{ shown: WatchEvent[]; error?: unknown }> {
    const shown: WatchEvent[] = [];
    try {
      for await (const event of whileWaiting(
        (async function* () {
          yield* events;
        })(),
        s,
      ))
        shown.push(event);
      return { shown };
    } catch (error) {
      return { shown, error };
    }
  }

  it("shows what was there while the session waited, and ends before a step made after it stopped waiting", async () => {
    const before = [transition(5), step(3, waitingSince - 10), step(4, waitingSince)];
    const after = step(5, waitingSince + 20);
    const { shown, error } = await seen([...before, after, transition(6)]);
    expect(shown).toEqual(before);
    expect(error).toMatchObject({ reason: "SESSION_NOT_FOUND" });
  });

  it("shows the move out of waiting, then ends", async () => {
    const { shown, error } = await seen([transition(6), step(5, waitingSince + 20)]);
    expect(shown).toEqual([transition(6)]);
    expect(error).toMatchObject({ reason: "SESSION_NOT_FOUND" });
  });
});
