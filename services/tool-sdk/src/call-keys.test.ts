import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "@loopguard/test-kit";
import { importJWK, SignJWT } from "jose";
import { describe, expect, it, onTestFinished } from "vitest";
import { type CredentialsError, newKeyPair } from "./auth.js";
import { CallCredentials, CallKeyChecker, newCallSecret, readCallKeys, toolCallKeys } from "./call-keys.js";
import { publicKeySet, withBinding } from "./key-bindings.js";
import { TokenVerifier } from "./token-verifier.js";

const secrets = readCallKeys({ keys: [newCallSecret("call-1")] });
const minter = new CallCredentials(secrets);
const keysOf = (tool: string, from = secrets) => readCallKeys(toolCallKeys(from, tool), tool);
const billing = new CallKeyChecker(keysOf("billing"), "billing", "BILLING_CALL_KEYS_FILE");
const risk = new CallKeyChecker(keysOf("risk"), "risk", "RISK_CALL_KEYS_FILE");
const soon = () => Date.now() + 60_000;
const claims = { subject: "session:s1", audience: "billing", scopes: ["billing:refund"], expiresAt: soon() };

function refusedBy(checker: CallKeyChecker, token: string, now = Date.now()): string {
  try {
    checker.check(token, now);
  } catch (error) {
    return (error as CredentialsError).message;
  }
  throw new Error("the credential was accepted");
}

function payloadOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8")) as Record<string, unknown>;
}

function withPayload(token: string, payload: Record<string, unknown>): string {
  const [header, , mac] = token.split(".");
  return `${header}.${Buffer.from(JSON.stringify(payload)).toString("base64url")}.${mac}`;
}

describe("call credentials", () => {
  it("name one session, one audience and the method's scope, bind a request, and expire", () => {
    const token = minter.mint({ ...claims, requestDigest: "ab".repeat(32) });
    const { caller, expiresAt } = billing.check(token, Date.now())!;
    expect(caller).toMatchObject({ subject: "session:s1", role: "orchestrator", keyId: "call-1" });
    expect([...caller.scopes]).toEqual(["billing:refund"]);
    expect(caller.requestDigest).toBe("ab".repeat(32));
    expect(expiresAt).toBe(Math.ceil(claims.expiresAt / 1000) * 1000);
    expect(refusedBy(billing, token, expiresAt)).toBe("the bearer token expired");
  });

  it("made for one tool are refused by every other, and a tool's own key cannot make one for another", () => {
    const forBilling = minter.mint(claims);
    expect(refusedBy(risk, forBilling)).toMatch(/does not verify with risk's call key call-1/);
    // Billing holds its key and nothing else: what it makes for risk does not verify there.
    const [billingKey] = keysOf("billing");
    const forged = new CallCredentials([billingKey!]).mint({ ...claims, audience: "risk", scopes: ["risk:read"] });
    expect(refusedBy(risk, forged)).toMatch(/does not verify with risk's call key/);
    expect(keysOf("billing")[0]!.secret.equals(keysOf("risk")[0]!.secret)).toBe(false);
    expect(keysOf("billing")[0]!.secret.equals(secrets[0]!.secret)).toBe(false);
  });

  it("refuse any change to the claims: another session, amount's digest, scope or expiry", () => {
    const token = minter.mint({ ...claims, requestDigest: "ab".repeat(32) });
    const payload = payloadOf(token);
    for (const change of [
      { sub: "session:s2" },
      { req: "cd".repeat(32) },
      { scope: "billing:refund billing:read" },
      { exp: Number(payload.exp) + 3600 },
    ]) {
      expect(refusedBy(billing, withPayload(token, { ...payload, ...change }))).toMatch(/does not verify/);
    }
  });

  it("refuse a signature written any other way than the one made: characters added that base64url decoding skips", () => {
    const token = minter.mint(claims);
    expect(billing.check(token, Date.now())?.caller.subject).toBe("session:s1");
    for (const altered of [`${token}!!`, `${token}=`, `${token.slice(0, -4)}+${token.slice(-4)}`]) {
      expect(refusedBy(billing, altered)).toMatch(/does not verify/);
    }
  });

  it("checked here only under a known key with this exact header: any other header is not one of ours", async () => {
    const other = new CallCredentials(readCallKeys({ keys: [newCallSecret("call-unknown")] }));
    expect(refusedBy(billing, other.mint(claims))).toMatch(/call key call-unknown is not one held by billing/);
    // A signed (EdDSA) token is left to the JWKS.
    const pair = newKeyPair("p");
    const signed = await new SignJWT({})
      .setProtectedHeader({ alg: "EdDSA", kid: "p" })
      .sign(await importJWK(pair.privateJwk, "EdDSA"));
    expect(billing.check(signed, Date.now())).toBeUndefined();
  });

  it("a credential whose subject is not a session, or that lacks its issuer, is refused even when the MAC holds", () => {
    const person = minter.mint({ ...claims, subject: "approver" });
    expect(refusedBy(billing, person)).toMatch(/names a session/);
  });

  it("key sets: each key once, for the tool that reads it, at least 32 bytes", () => {
    expect(() => readCallKeys(toolCallKeys(secrets, "billing"), "risk")).toThrow(/is for billing, not risk/);
    expect(() => readCallKeys({ keys: [newCallSecret("a"), newCallSecret("a")] })).toThrow(/listed twice/);
    expect(() => readCallKeys({ keys: [{ kty: "oct", kid: "s", k: "c2hvcnQ" }] })).toThrow(/at least 32/);
    expect(() => readCallKeys({ keys: [] })).toThrow(/one key or more/);
  });
});

describe("a tool's verifier with call keys", () => {
  it("follows its keys file: a new key is taken and a removed one refused within about a second", async () => {
    const { dir, remove } = tempDir("call-keys");
    onTestFinished(remove);
    const file = join(dir, "billing.json");
    const write = (from: typeof secrets) => {
      writeFileSync(`${file}.tmp`, JSON.stringify(toolCallKeys(from, "billing")));
      renameSync(`${file}.tmp`, file);
    };
    const next = readCallKeys({ keys: [newCallSecret("call-2")] });
    write(secrets);
    const people = publicKeySet({
      keys: [withBinding(newKeyPair("person").publicJwk, { role: "person", subject: "alice", scopes: ["*"] })],
    });
    const verifier = new TokenVerifier(people, "billing", {
      callKeys: { file, keys: keysOf("billing") },
    });
    const old = minter.mint(claims);
    expect((await verifier.verify(old)).keyId).toBe("call-1");
    // Rotation: the tools get both keys first, then the orchestrator mints with the new one.
    write([...secrets, ...next]);
    await new Promise((r) => setTimeout(r, 1100));
    const fresh = new CallCredentials(next).mint(claims);
    expect((await verifier.verify(fresh)).keyId).toBe("call-2");
    expect((await verifier.verify(old)).keyId).toBe("call-1");
    write(next);
    await new Promise((r) => setTimeout(r, 1100));
    // Named by its variable: a refusal goes to callers that hold nothing, who learn no path of the tool's.
    const refused = await verifier.verify(old).catch((error: Error) => error.message);
    expect(refused).toBe(
      "the bearer token's call key call-1 is not one held by billing (BILLING_CALL_KEYS_FILE): unknown or removed",
    );
    expect(refused).not.toContain(file);
    expect((await verifier.verify(fresh)).keyId).toBe("call-2");
    // A held key's credential whose header was written again (same kid, other bytes) is told so, not "not held".
    const [header, ...rest] = fresh.split(".");
    const rewritten = Buffer.from(
      JSON.stringify(JSON.parse(Buffer.from(header!, "base64url").toString()), null, 1),
    ).toString("base64url");
    await expect(verifier.verify([rewritten, ...rest].join("."))).rejects.toThrow(
      /names call key call-2, but its header is not the one billing \(BILLING_CALL_KEYS_FILE\) makes with it/,
    );
  });

  it("says a tool given no call keys cannot check the orchestrator's call credential, naming the setting", async () => {
    const people = publicKeySet({
      keys: [withBinding(newKeyPair("person").publicJwk, { role: "person", subject: "alice", scopes: ["*"] })],
    });
    const verifier = new TokenVerifier(people, "billing");
    await expect(verifier.verify(minter.mint(claims))).rejects.toThrow(
      "the bearer token is the orchestrator's call credential, but billing was given no call keys to check it (BILLING_CALL_KEYS_FILE)",
    );
  });

  it("refuses a token that claims HS256 with the orchestrator's public key as the MAC secret", async () => {
    const pair = newKeyPair("orch");
    const keys = publicKeySet({
      keys: [withBinding(pair.publicJwk, { role: "orchestrator", subject: "session:*", scopes: ["*"] })],
    });
    const verifier = new TokenVerifier(keys, "billing", {
      callKeys: { file: "/nonexistent", keys: keysOf("billing") },
    });
    const confused = await new SignJWT({ scope: "billing:refund" })
      .setProtectedHeader({ alg: "HS256", kid: "orch" })
      .setSubject("session:s1")
      .setIssuer("loopguard")
      .setAudience("billing")
      .setIssuedAt()
      .setExpirationTime("1m")
      .sign(Buffer.from(JSON.stringify(pair.publicJwk)));
    await expect(verifier.verify(confused)).rejects.toThrow(/call key orch is not one held by billing/);
  });
});
