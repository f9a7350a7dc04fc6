// The binding rule every service's JWKS check and `pnpm keys` share: only the orchestrator's key
// signs for many subjects; every other key is bound to exactly one.
import { describe, expect, it } from "vitest";
import { KeyError, newKeyPair } from "./auth.js";
import { bindingProblem, publicKeySet, subjectAllowed, trustedKeys, withBinding } from "./key-bindings.js";

describe("a break-glass key's scopes", () => {
  it("are irreversible methods' scopes only: never the orchestrator API's, a read, or a pattern", () => {
    for (const scope of ["approvals:write", "sessions:admin", "billing:read", "*", "billing:*"])
      expect(bindingProblem({ role: "break-glass", subject: "alice", scopes: ["billing:refund", scope] })).toMatch(
        new RegExp(
          `^a break-glass key may hold irreversible methods' scopes only \\(.*billing:refund.*\\), not "${scope.replace("*", "\\*")}"$`,
        ),
      );
  });
});

describe("a key's subject", () => {
  it("is exactly one subject for a person, break-glass or probe key, never a pattern", () => {
    for (const role of ["person", "break-glass", "probe"] as const) {
      for (const subject of ["*", "oidc:*", "session:*", "alice*"]) {
        const scopes = { person: ["sessions:read"], "break-glass": ["billing:refund"], probe: ["kb:read"] }[role];
        expect(bindingProblem({ role, subject, scopes })).toBe(
          `a ${role} key is bound to exactly one subject, never a pattern: "${subject}" would let its one holder speak for every subject it covers (only the orchestrator's key is bound to a pattern, "session:*")`,
        );
      }
    }
    expect(bindingProblem({ role: "person", subject: "alice", scopes: ["sessions:read"] })).toBeUndefined();
    expect(bindingProblem({ role: "break-glass", subject: "alice", scopes: ["billing:refund"] })).toBeUndefined();
    expect(bindingProblem({ role: "probe", subject: "release-smoke", scopes: ["kb:read"] })).toBeUndefined();
    expect(bindingProblem({ role: "person", subject: "oidc:alice", scopes: ["sessions:read"] })).toMatch(
      /a person key may not claim "oidc:alice"/,
    );
  });

  it("may be the pattern session:* for the orchestrator's key, and covers its sessions only", () => {
    const binding = { role: "orchestrator", subject: "session:*", scopes: ["*"] } as const;
    expect(bindingProblem(binding)).toBeUndefined();
    expect(subjectAllowed(binding, "session:ses_1")).toBe(true);
    expect(subjectAllowed(binding, "oidc:alice")).toBe(false);
  });

  it("stops a JWKS that binds a person key to a pattern from loading, naming the key and how to fix it", () => {
    const pair = newKeyPair("wild");
    const jwks = {
      keys: [
        withBinding(newKeyPair("orch").publicJwk, { role: "orchestrator", subject: "session:*", scopes: ["*"] }),
        withBinding(pair.publicJwk, { role: "person", subject: "oidc:*", scopes: ["sessions:read"] }),
      ],
    };
    expect(() => publicKeySet(jwks)).toThrow(KeyError);
    expect(() => trustedKeys(jwks)).toThrow(
      /^key wild of the JWKS: a person key is bound to exactly one subject, never a pattern: "oidc:\*".*\(rebind it with `pnpm keys bind --kid wild …`, or `pnpm keys revoke --kid wild`\)$/,
    );
  });
});
