// The local people's keys as `pnpm start` makes them, and the real `pnpm mint-token` and `pnpm keys`
// commands on them: one person at a time, never a subject from a flag, never an irreversible
// method's scope for a person.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { decodeJwt } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyPair } from "../src/auth.js";
import { publicKeySet } from "../src/key-bindings.js";
import { ensureLocalKeys, type LocalKeys } from "../src/local-keys.js";

const CLI_DIR = fileURLToPath(new URL("../dist/cli/", import.meta.url));
let dir: string;
let keys: LocalKeys;

function run(
  name: "keys" | "mint-token",
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(CLI_DIR, `${name}.js`), ...args],
      { env: { ...process.env, LOOPGUARD_DATA_DIR: dir, ...env }, timeout: 30_000 },
      (error, stdout, stderr) =>
        done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** The flags that name a key's kid, role, subject, scopes and key set, as `keys new` and `keys bind` take them. */
function keyArgs(key: { kid: string; role: string; subject: string; scopes: string[]; jwks: string }): string[] {
  return [
    ...["--kid", key.kid, "--role", key.role, "--subject", key.subject],
    ...key.scopes.flatMap((scope) => ["--scope", scope]),
    ...["--jwks", key.jwks],
  ];
}

type Jwk = Record<string, unknown>;
const jwksOf = (path: string) => JSON.parse(readFileSync(path, "utf8")) as { keys: Jwk[]; revoked?: string[] };

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "loopguard-people-"));
  keys = ensureLocalKeys(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the local people", () => {
  it("are three key pairs (0600) beside the orchestrator's and the release's probe, each bound to its subject and scopes, none holding billing:refund", () => {
    const bindings: Record<string, [unknown, unknown]> = Object.fromEntries(
      jwksOf(keys.jwks).keys.map((k) => [String(k.loopguard_subject), [k.loopguard_role, k.loopguard_scopes]]),
    );
    expect(Object.keys(bindings).sort()).toEqual(["approver", "operator", "release-smoke", "requester", "session:*"]);
    expect(bindings["release-smoke"]).toEqual(["probe", ["kb:read", "billing:read", "risk:read"]]);
    expect(bindings["session:*"]).toEqual([
      "orchestrator",
      expect.arrayContaining(["kb:read", "billing:read", "billing:refund", "risk:read"]),
    ]);
    expect(bindings.approver).toEqual(["person", ["sessions:read", "approvals:write"]]);
    expect(bindings.requester).toEqual([
      "person",
      expect.arrayContaining(["sessions:read", "sessions:write", "grant:billing:refund"]),
    ]);
    expect(bindings.operator).toEqual([
      "person",
      expect.arrayContaining(["sessions:admin", "tool:admin", "billing:read"]),
    ]);
    for (const [, [role, scopes]] of Object.entries(bindings))
      if (role === "person") expect(scopes).not.toContain("billing:refund");
    for (const path of [keys.orchestrator, ...Object.values(keys.people), keys.smoke])
      expect(statSync(path).mode & 0o777).toBe(0o600);
  });

  it("upgrade an older folder: its operator key becomes the operator person, and a revoked local key is replaced, never trusted again", () => {
    const old = mkdtempSync(join(tmpdir(), "loopguard-people-old-"));
    try {
      const operator = newKeyPair("local-operator-2026-11-01");
      const orchestrator = newKeyPair("local-orchestrator-2026-11-01");
      const before = ensureLocalKeys(old);
      writeFileSync(before.people.operator, JSON.stringify(operator.privateJwk));
      writeFileSync(before.orchestrator, JSON.stringify(orchestrator.privateJwk));
      writeFileSync(before.jwks, JSON.stringify({ keys: [operator.publicJwk, orchestrator.publicJwk] }));
      const upgraded = jwksOf(ensureLocalKeys(old).jwks);
      expect(upgraded.keys.find((k) => k.kid === "local-operator-2026-11-01")).toMatchObject({
        loopguard_role: "person",
        loopguard_subject: "operator",
      });
      expect(() => publicKeySet(upgraded)).not.toThrow();

      const approverKid = upgraded.keys.find((k) => k.loopguard_subject === "approver")!.kid as string;
      writeFileSync(
        before.jwks,
        JSON.stringify({ keys: upgraded.keys.filter((k) => k.kid !== approverKid), revoked: [approverKid] }),
      );
      const renewed = jwksOf(ensureLocalKeys(old).jwks);
      const approver = renewed.keys.find((k) => k.loopguard_subject === "approver")!;
      expect(approver.kid).not.toBe(approverKid);
      expect(renewed.revoked).toEqual([approverKid]);
      expect((JSON.parse(readFileSync(before.people.approver, "utf8")) as Jwk).kid).toBe(approver.kid);
    } finally {
      rmSync(old, { recursive: true, force: true });
    }
  });
});

describe("pnpm mint-token", () => {
  it("refuses an irreversible method's scope to every person, in one line, exit 2", async () => {
    const r = await run("mint-token", ["--as", "operator", "--scope", "billing:refund"]);
    expect([r.code, r.stdout]).toEqual([2, ""]);
    expect(r.stderr).toMatch(
      /^mint-token: "billing:refund" is the scope of billing\.Refund, .*only the orchestrator mints it, bound to one request.*\n$/,
    );
    expect(r.stderr.split("\n")).toHaveLength(2);
  });

  it("refuses --subject, and scopes the person's key may not carry", async () => {
    const subject = await run("mint-token", ["--subject", "approver", "--scope", "kb:read"]);
    expect([subject.code, subject.stderr]).toEqual([
      2,
      expect.stringMatching(/^mint-token: --subject is gone: .*--as NAME/),
    ]);
    const beyond = await run("mint-token", ["--as", "approver", "--scope", "kb:read"]);
    expect([beyond.code, beyond.stderr]).toEqual([
      2,
      expect.stringMatching(/^mint-token: approver's key may not carry "kb:read"/),
    ]);
    const unknown = await run("mint-token", ["--as", "mallory", "--scope", "kb:read"]);
    expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringMatching(/^mint-token: no key for "mallory"/)]);
    const probe = await run("mint-token", ["--as", "smoke", "--scope", "kb:read"]);
    expect([probe.code, probe.stderr]).toEqual([
      2,
      "mint-token: smoke's key is a probe key: it signs the release's smoke calls (`pnpm smoke`), not people's tokens\n",
    ]);
  });

  it("mints as the person --as (or LOOPGUARD_AS) names, with the subject the key is bound to; requester by default", async () => {
    const operator = await run("mint-token", ["--as", "operator", "--scope", "kb:read"]);
    expect(decodeJwt(operator.stdout.trim())).toMatchObject({ sub: "operator", aud: "kb-search", scope: "kb:read" });
    const approver = await run("mint-token", ["--scope", "approvals:write"], { LOOPGUARD_AS: "approver" });
    expect(decodeJwt(approver.stdout.trim())).toMatchObject({ sub: "approver", aud: "orchestrator" });
    const requester = await run("mint-token", ["--scope", "sessions:write"]);
    expect(decodeJwt(requester.stdout.trim()).sub).toBe("requester");
  });
});

describe("pnpm keys", () => {
  it("refuses a person key holding an irreversible method's scope, or a pattern covering one", async () => {
    for (const scope of ["billing:refund", "billing:*", "*"]) {
      const r = await run("keys", [
        "new",
        ...keyArgs({ kid: "bob-1", role: "person", subject: "bob", scopes: ["kb:read", scope], jwks: keys.jwks }),
      ]);
      expect([r.code, r.stderr]).toEqual([
        2,
        expect.stringMatching(/^keys: a person's key may not hold .*billing\.Refund/),
      ]);
    }
  });

  it("refuses a probe key holding any but the tools' read-only scopes", async () => {
    for (const scope of ["billing:refund", "sessions:read", "*"]) {
      const r = await run("keys", [
        "new",
        ...keyArgs({ kid: "probe-1", role: "probe", subject: "release-smoke", scopes: [scope], jwks: keys.jwks }),
      ]);
      expect([r.code, r.stderr]).toEqual([
        2,
        `keys: a probe key may hold read-only scopes only (kb:read billing:read risk:read), not "${scope}"\n`,
      ]);
    }
  });

  it("refuses a person or break-glass key bound to a subject pattern, and rebinds one an older JWKS holds to one subject", async () => {
    const jwks = join(dir, "pattern-jwks.json");
    for (const [role, subject] of [
      ["person", "oidc:*"],
      ["person", "*"],
      ["person", "alice*"],
      ["break-glass", "*"],
    ] as const) {
      const made = await run("keys", [
        "new",
        ...keyArgs({
          kid: "pattern-1",
          role,
          subject,
          scopes: [role === "person" ? "kb:read" : "billing:refund"],
          jwks,
        }),
        "--private-out",
        join(dir, "pattern-1.jwk"),
      ]);
      expect([made.code, made.stderr]).toEqual([
        2,
        `keys: a ${role} key is bound to exactly one subject, never a pattern: "${subject}" would let its one holder speak for every subject it covers (only the orchestrator's key is bound to a pattern, "session:*")\n`,
      ]);
    }
    expect(() => readFileSync(join(dir, "pattern-1.jwk"))).toThrow(/ENOENT/);
    // A JWKS written before the rule: `keys new` names the key at fault; `bind` gives it one subject.
    const pair = newKeyPair("wild-1");
    writeFileSync(
      jwks,
      JSON.stringify({
        keys: [{ ...pair.publicJwk, loopguard_role: "person", loopguard_subject: "*", loopguard_scopes: ["kb:read"] }],
      }),
    );
    const blocked = await run("keys", [
      "new",
      ...keyArgs({ kid: "bob-2", role: "person", subject: "bob", scopes: ["kb:read"], jwks }),
      "--private-out",
      join(dir, "bob-2.jwk"),
    ]);
    expect([blocked.code, blocked.stderr]).toEqual([
      2,
      expect.stringMatching(
        /key wild-1 of the JWKS: a person key is bound to exactly one subject.*pnpm keys bind --kid wild-1/,
      ),
    ]);
    const bound = await run("keys", [
      "bind",
      ...keyArgs({ kid: "wild-1", role: "person", subject: "alice", scopes: ["kb:read"], jwks }),
    ]);
    expect(bound.stderr).toBe("");
    expect(publicKeySet(jwksOf(jwks)).keys[0]).toMatchObject({ kid: "wild-1", loopguard_subject: "alice" });
  });

  it("binds an unbound key, revokes it, and never reuses a revoked kid", async () => {
    const jwks = join(dir, "deploy-jwks.json");
    const pair = newKeyPair("legacy-1");
    writeFileSync(jwks, JSON.stringify({ keys: [pair.publicJwk] }));
    const bind = await run("keys", [
      "bind",
      ...keyArgs({ kid: "legacy-1", role: "orchestrator", subject: "session:*", scopes: ["kb:read"], jwks }),
    ]);
    expect(bind.stderr).toBe("");
    expect(publicKeySet(jwksOf(jwks)).keys[0]).toMatchObject({
      loopguard_role: "orchestrator",
      loopguard_subject: "session:*",
      loopguard_scopes: ["kb:read"],
    });
    const person = await run("keys", [
      "bind",
      ...keyArgs({ kid: "legacy-1", role: "orchestrator", subject: "alice", scopes: ["kb:read"], jwks }),
    ]);
    expect([person.code, person.stderr]).toEqual([
      2,
      expect.stringMatching(/orchestrator key signs for sessions only/),
    ]);
    expect((await run("keys", ["revoke", "--kid", "legacy-1", "--jwks", jwks])).code).toBe(0);
    expect(jwksOf(jwks)).toEqual({ keys: [], revoked: ["legacy-1"] });
    const again = await run("keys", [
      "new",
      ...keyArgs({ kid: "legacy-1", role: "person", subject: "alice", scopes: ["kb:read"], jwks }),
      "--private-out",
      join(dir, "x.jwk"),
    ]);
    expect([again.code, again.stderr]).toEqual([
      2,
      expect.stringMatching(/"legacy-1" was revoked; a revoked kid is never used again/),
    ]);
  });
});
