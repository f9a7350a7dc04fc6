import type { Caller } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { OPERATOR_SCOPES, refusedGrant } from "./grants.js";

const caller = (...scopes: string[]): Caller => ({
  subject: "requester",
  scopes: new Set(scopes),
  role: "person",
  keyId: "local-requester",
});

describe("refusedGrant", () => {
  it("reads the operator scopes from the contracts", () => {
    expect([...OPERATOR_SCOPES].sort()).toEqual([
      "approvals:write",
      "patrol:report",
      "sessions:admin",
      "sessions:read",
      "sessions:write",
      "tool:admin",
    ]);
  });

  it("lets a caller grant what it holds, or what it may delegate", () => {
    expect(
      refusedGrant(["kb:read", "billing:refund"], caller("sessions:write", "kb:read", "grant:billing:refund")),
    ).toBeUndefined();
  });

  it("refuses a scope the caller does not hold, naming it", () => {
    expect(refusedGrant(["kb:read", "billing:refund"], caller("sessions:write", "kb:read"))).toMatchObject({
      scope: "billing:refund",
    });
  });

  it("never grants an operator scope, even to a caller holding it", () => {
    for (const scope of OPERATOR_SCOPES) {
      expect(refusedGrant([scope], caller(scope, `grant:${scope}`))?.why).toMatch(/operator scope/);
    }
  });
});
