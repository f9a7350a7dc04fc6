import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "@loopguard/test-kit";
import { describe, expect, it, onTestFinished } from "vitest";
import { newKeyPair } from "./auth.js";
import { newCallSecret, readCallKeys, toolCallKeys } from "./call-keys.js";
import { describeConfig, loadToolConfig, readSigningKey } from "./config.js";
import { ConfigError } from "./settings.js";
import { withBinding } from "./key-bindings.js";

const pair = newKeyPair("unit-key");
const bound = withBinding(pair.publicJwk, { role: "person", subject: "alice", scopes: ["kb:read"] });
const auth = { LOOPGUARD_JWKS: JSON.stringify({ keys: [bound] }) };
const jwks = (...keys: object[]) => ({ LOOPGUARD_JWKS: JSON.stringify({ keys }) });

describe("loadToolConfig", () => {
  it("reads prefixed variables and falls back to the defaults", () => {
    const config = loadToolConfig("kb-search", { port: 50061, metricsPort: 9461 }, { ...auth, KB_SEARCH_PORT: "7000" });
    expect(config).toMatchObject({ port: 7000, metricsPort: 9461, host: "127.0.0.1", maxConcurrent: 64 });
    expect(config.publicKeys.keys.map((k) => k.kid)).toEqual(["unit-key"]);
    expect(Object.isFrozen(config)).toBe(true);
  });

  it("bounds streams apart from unary calls: a total and a per-caller share no larger than it", () => {
    const defaults = { port: 1, metricsPort: 2, maxStreams: 100, maxStreamsPerCaller: 10 };
    expect(loadToolConfig("orchestrator", defaults, auth)).toMatchObject({
      maxConcurrent: 64,
      maxStreams: 100,
      maxStreamsPerCaller: 10,
    });
    expect(loadToolConfig("orchestrator", defaults, { ...auth, ORCHESTRATOR_MAX_STREAMS: "5" })).toMatchObject({
      maxStreams: 5,
      maxStreamsPerCaller: 5,
    });
    expect(() =>
      loadToolConfig("orchestrator", defaults, { ...auth, ORCHESTRATOR_MAX_STREAMS_PER_CALLER: "101" }),
    ).toThrow(/ORCHESTRATOR_MAX_STREAMS_PER_CALLER must be an integer in 1..100, got "101"/);
  });

  it("fails fast on a bad number, naming the variable", () => {
    expect(() => loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, BILLING_PORT: "70000" })).toThrow(
      /BILLING_PORT must be an integer in 0..65535, got "70000"/,
    );
  });

  it("listens on a host name or an IP address, and refuses anything else naming the variable", () => {
    for (const host of ["0.0.0.0", "kb-0.kb.loopguard.svc", "127.0.0.2"])
      expect(loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { ...auth, KB_SEARCH_HOST: host }).host).toBe(
        host,
      );
    for (const host of ["127.0.0.1 ", "http://127.0.0.1", "127.0.0.1:50061", "[::1]", "kb_0", "-kb"])
      expect(() => loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { ...auth, KB_SEARCH_HOST: host })).toThrow(
        new ConfigError(`KB_SEARCH_HOST must be a host name or an IP address, without scheme or port, got "${host}"`),
      );
  });

  it("fails fast on an unknown LOG_LEVEL with a ConfigError", () => {
    expect(() => loadToolConfig("risk", { port: 1, metricsPort: 2 }, { ...auth, LOG_LEVEL: "loud" })).toThrow(
      ConfigError,
    );
  });

  it("refuses to start without public keys, naming the variable", () => {
    expect(() => loadToolConfig("risk", { port: 1, metricsPort: 2 }, {})).toThrow(/LOOPGUARD_JWKS_FILE/);
  });

  it("asks clients to reconnect after a max connection age (30 s, 10 s grace by default; 0 turns it off)", () => {
    const config = loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, auth);
    expect(config).toMatchObject({ maxConnectionAgeMs: 30_000, maxConnectionAgeGraceMs: 10_000 });
    const off = loadToolConfig(
      "kb-search",
      { port: 1, metricsPort: 2 },
      { ...auth, KB_SEARCH_MAX_CONNECTION_AGE_MS: "0" },
    );
    expect(off.maxConnectionAgeMs).toBe(0);
    expect(() =>
      loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { ...auth, KB_SEARCH_MAX_CONNECTION_AGE_MS: "-1" }),
    ).toThrow(/KB_SEARCH_MAX_CONNECTION_AGE_MS must be an integer/);
  });

  it("refuses the retired shared secret, saying what replaces it", () => {
    expect(() =>
      loadToolConfig("risk", { port: 1, metricsPort: 2 }, { ...auth, LOOPGUARD_AUTH_SECRET: "s".repeat(40) }),
    ).toThrow(/no longer used.*LOOPGUARD_JWKS_FILE.*LOOPGUARD_SIGNING_KEY_FILE/);
  });

  it("refuses a JWKS that holds a private key", () => {
    expect(() =>
      loadToolConfig(
        "risk",
        { port: 1, metricsPort: 2 },
        { LOOPGUARD_JWKS: JSON.stringify({ keys: [pair.privateJwk] }) },
      ),
    ).toThrow(/private material/);
  });

  it("refuses to give a tool a private key", () => {
    expect(() =>
      loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, LOOPGUARD_SIGNING_KEY_FILE: "/any" }),
    ).toThrow(/must not hold a private key/);
  });

  it("gives a tool its own call keys only: never the call secrets, never another tool's keys", () => {
    const { dir, remove } = tempDir("config");
    onTestFinished(remove);
    const secrets = readCallKeys({ keys: [newCallSecret("call-1")] });
    writeFileSync(join(dir, "billing.json"), JSON.stringify(toolCallKeys(secrets, "billing")));
    writeFileSync(join(dir, "risk.json"), JSON.stringify(toolCallKeys(secrets, "risk")));
    const load = (env: Record<string, string>) =>
      loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, ...env });
    const config = load({ BILLING_CALL_KEYS_FILE: join(dir, "billing.json") });
    expect(config.callKeys?.keys.map((k) => k.kid)).toEqual(["call-1"]);
    expect(describeConfig(config).callKeys).toEqual({ file: join(dir, "billing.json"), kids: ["call-1"] });
    expect(() => load({ BILLING_CALL_KEYS_FILE: join(dir, "risk.json") })).toThrow(
      /BILLING_CALL_KEYS_FILE: call key call-1 is for risk, not billing/,
    );
    expect(() => load({ LOOPGUARD_CALL_SECRETS_FILE: join(dir, "billing.json") })).toThrow(
      /must not hold the orchestrator's call secrets.*BILLING_CALL_KEYS_FILE/,
    );
    expect(load({}).callKeys).toBeUndefined();
  });

  it("reads a signing key from a file, and refuses a public one", () => {
    const { dir, remove } = tempDir("config");
    onTestFinished(remove);
    writeFileSync(join(dir, "private.jwk"), JSON.stringify(pair.privateJwk));
    writeFileSync(join(dir, "public.jwk"), JSON.stringify(pair.publicJwk));
    expect(readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: join(dir, "private.jwk") }).kid).toBe("unit-key");
    expect(() => readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: join(dir, "public.jwk") })).toThrow(
      /private Ed25519 JWK/,
    );
    expect(() => readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: join(dir, "missing.jwk") })).toThrow(/cannot read/);
  });

  it("refuses a key bound to no one, naming `pnpm keys bind`, an unknown role, and an orchestrator key that may claim a person", () => {
    const load = (env: Record<string, string>) => () => loadToolConfig("risk", { port: 1, metricsPort: 2 }, env);
    expect(load(jwks(pair.publicJwk))).toThrow(
      /key unit-key of the JWKS is bound to no one: run `pnpm keys bind --kid unit-key --role/,
    );
    expect(load(jwks({ ...bound, loopguard_role: "admin" }))).toThrow(
      /loopguard_role must be one of orchestrator, person, break-glass/,
    );
    expect(
      load(jwks(withBinding(pair.publicJwk, { role: "orchestrator", subject: "*", scopes: ["kb:read"] }))),
    ).toThrow(/its loopguard_subject must be "session:\*"/);
    expect(load(jwks({ ...bound, loopguard_scopes: "kb:read" }))).toThrow(/loopguard_scopes must be an array/);
    expect(load({ LOOPGUARD_JWKS: JSON.stringify({ keys: [bound], revoked: ["unit-key"] }) })).toThrow(
      /unit-key of the JWKS is revoked/,
    );
    expect(
      load(
        jwks(
          withBinding(pair.publicJwk, {
            role: "probe",
            subject: "release-smoke",
            scopes: ["kb:read", "sessions:read"],
          }),
        ),
      ),
    ).toThrow(
      'key unit-key of the JWKS: a probe key may hold read-only scopes only (kb:read billing:read risk:read), not "sessions:read"',
    );
  });

  it("keeps break-glass off unless <PREFIX>_BREAK_GLASS=on", () => {
    const load = (env: Record<string, string>) =>
      loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, ...env });
    expect(load({}).breakGlass).toBe(false);
    expect(load({ BILLING_BREAK_GLASS: "on" }).breakGlass).toBe(true);
    expect(() => load({ BILLING_BREAK_GLASS: "yes" })).toThrow(/BILLING_BREAK_GLASS must be "on" or "off", got "yes"/);
    expect(describeConfig(load({ BILLING_BREAK_GLASS: "on" })).breakGlass).toBe(true);
  });

  it("describes keys by id only", () => {
    const config = loadToolConfig("risk", { port: 1, metricsPort: 2 }, auth);
    expect(describeConfig(config).publicKeys).toEqual(["unit-key"]);
    expect(JSON.stringify(describeConfig(config))).not.toContain(String(pair.publicJwk.x));
  });

  it("reads a fault profile at start from LOOPGUARD_FAULT_PROFILE, in the JSON form SetFaults takes", () => {
    const load = (profile: string) =>
      loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, LOOPGUARD_FAULT_PROFILE: profile });
    expect(load('{"errorRate": 0.3, "methods": ["GetOrder"]}').faultProfile).toMatchObject({
      errorRate: 0.3,
      methods: ["GetOrder"],
      outage: false,
    });
    expect(load('{"added_latency_ms": 200, "retry_after_ms": 50}').faultProfile).toMatchObject({
      addedLatencyMs: 200,
      retryAfterMs: 50,
    });
    expect(load(" ").faultProfile).toBeUndefined();
    expect(loadToolConfig("billing", { port: 1, metricsPort: 2 }, auth).faultProfile).toBeUndefined();
    expect(describeConfig(load('{"errorRate": 0.3, "methods": ["GetOrder"]}')).faultProfile).toEqual({
      added_latency_ms: 0,
      response_delay_ms: 0,
      error_rate: 0.3,
      outage: false,
      retry_after_ms: 0,
      methods: ["GetOrder"],
    });
  });

  it("refuses a malformed fault profile with one line naming the variable and the fault", () => {
    const error = (profile: string) => {
      try {
        loadToolConfig("billing", { port: 1, metricsPort: 2 }, { ...auth, LOOPGUARD_FAULT_PROFILE: profile });
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as Error).message;
      }
      throw new Error(`accepted ${profile}`);
    };
    expect(error("{errorRate: 0.3}")).toMatch(/^LOOPGUARD_FAULT_PROFILE: not a fault profile: .*JSON/);
    expect(error('{"errorRate": 1.5}')).toBe(
      "LOOPGUARD_FAULT_PROFILE: error_rate: must be greater than or equal to 0 and less than or equal to 1",
    );
    expect(error('{"errorRatio": 0.3}')).toMatch(
      /^LOOPGUARD_FAULT_PROFILE: not a fault profile: .*"errorRatio" is unknown/,
    );
    expect(error('{"errorRate": "a lot"}')).toMatch(/^LOOPGUARD_FAULT_PROFILE: not a fault profile: /);
    expect(error('{"addedLatencyMs": 120000}')).toMatch(
      /^LOOPGUARD_FAULT_PROFILE: added_latency_ms: must be less than or equal to 60000$/,
    );
    for (const profile of ["{", '{"errorRate": 1.5}', '{"errorRatio": 0.3}'])
      expect(error(profile)).not.toContain("\n");
  });
});
