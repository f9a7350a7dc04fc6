import { describe, expect, it } from "vitest";
import { ConfigError, describeConfig, loadToolConfig } from "./config.js";

const secret = "s".repeat(40);

describe("loadToolConfig", () => {
  it("reads prefixed variables and falls back to the defaults", () => {
    const config = loadToolConfig("kb-search", { port: 50061, metricsPort: 9461 }, { LOOPGUARD_AUTH_SECRET: secret, KB_SEARCH_PORT: "7000" });
    expect(config).toMatchObject({ port: 7000, metricsPort: 9461, host: "127.0.0.1", maxConcurrent: 64 });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it("fails fast on a bad number, naming the variable", () => {
    expect(() => loadToolConfig("billing", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret, BILLING_PORT: "70000" })).toThrow(
      /BILLING_PORT must be an integer in 0..65535, got "70000"/,
    );
  });

  it("fails fast on an unknown LOG_LEVEL with a ConfigError", () => {
    expect(() => loadToolConfig("risk", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret, LOG_LEVEL: "loud" })).toThrow(ConfigError);
  });

  it("refuses to start without an auth secret", () => {
    expect(() => loadToolConfig("risk", { port: 1, metricsPort: 2 }, {})).toThrow(ConfigError);
  });

  it("asks clients to reconnect after a max connection age (30 s, 10 s grace by default; 0 turns it off)", () => {
    const config = loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret });
    expect(config).toMatchObject({ maxConnectionAgeMs: 30_000, maxConnectionAgeGraceMs: 10_000 });
    const off = loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret, KB_SEARCH_MAX_CONNECTION_AGE_MS: "0" });
    expect(off.maxConnectionAgeMs).toBe(0);
    expect(() => loadToolConfig("kb-search", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret, KB_SEARCH_MAX_CONNECTION_AGE_MS: "-1" })).toThrow(
      /KB_SEARCH_MAX_CONNECTION_AGE_MS must be an integer/,
    );
  });

  it("never describes the secret", () => {
    const config = loadToolConfig("risk", { port: 1, metricsPort: 2 }, { LOOPGUARD_AUTH_SECRET: secret });
    expect(JSON.stringify(describeConfig(config))).not.toContain(secret);
  });
});
