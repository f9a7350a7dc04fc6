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
} from "./session-access.js";
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
