import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { SESSION_STATES, TERMINAL_STATES } from "../session/session-state.js";
import { connectPath, replacementOf, STATES_MODULE } from "./http-port.js";

const { method } = OrchestratorService;

describe("replacementOf: the Connect method that replaced a removed /api route", () => {
  it("names each route's method, by verb where a path had two", () => {
    expect(replacementOf("GET", "/api/overview")).toBe(method.getOverview);
    expect(replacementOf("GET", "/api/tools")).toBe(method.listToolStats);
    expect(replacementOf("GET", "/api/approvals")).toBe(method.listApprovals);
    expect(replacementOf("GET", "/api/sessions")).toBe(method.listSessions);
    expect(replacementOf("POST", "/api/sessions/")).toBe(method.startSession);
    expect(replacementOf("GET", "/api/sessions/ses_1")).toBe(method.getSessionDetail);
    expect(replacementOf("POST", "/api/sessions/ses_1/approve")).toBe(method.resolveApproval);
    expect(replacementOf("POST", "/api/sessions/ses_1/deny")).toBe(method.resolveApproval);
    expect(replacementOf("POST", "/api/sessions/ses_1/cancel")).toBe(method.cancelSession);
  });

  it("names the method of a path that had one route whatever the verb; nothing for a path that never was a route", () => {
    expect(replacementOf("DELETE", "/api/overview")).toBe(method.getOverview);
    expect(replacementOf("DELETE", "/api/sessions")).toBeUndefined();
    expect(replacementOf("GET", "/api/sessions//approve")).toBeUndefined();
    expect(replacementOf("GET", "/api/nothing-here")).toBeUndefined();
  });

  it("a method's Connect path is the service's full name and the method's", () => {
    expect(connectPath(method.getOverview)).toBe("/loopguard.orchestrator.v1.OrchestratorService/GetOverview");
  });
});

describe("STATES_MODULE: the dashboard's state list", () => {
  it("is the state machine's states and terminal states, as an ES module", async () => {
    const url = `data:text/javascript;base64,${STATES_MODULE.toString("base64")}`;
    const module = (await import(url)) as { STATES: string[]; TERMINAL: Set<string> };
    expect(module.STATES).toEqual(SESSION_STATES);
    expect([...module.TERMINAL]).toEqual(TERMINAL_STATES);
  });
});
