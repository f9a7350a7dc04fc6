import { ConfigError } from "@loopguard/tool-sdk";
import { TEST_AUTH_ENV, testOrchestratorEnv } from "@loopguard/tool-sdk/testing";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { describeOrchestratorConfig, loadOrchestratorConfig } from "./config.js";

const base = { ...testOrchestratorEnv(), LOOPGUARD_DATA_DIR: "/var/lib/loopguard" };
const dir = mkdtempSync(join(tmpdir(), "orchestrator-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
/** A file holding `text`, as a mounted Secret does. */
function secretFile(text: string): string {
  const file = join(dir, `secret-${++files}`);
  writeFileSync(file, text, { mode: 0o600 });
  return file;
}

describe("ORCHESTRATOR_STORE", () => {
  it("defaults to orchestrator.db in the data folder", () => {
    expect(loadOrchestratorConfig(base).storeUrl).toBe("sqlite:/var/lib/loopguard/orchestrator.db");
  });

  it("is a configuration error, naming the variable and not the password, when no store can be made of it", () => {
    const load = () => loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE: "mysql://orch:hunter2@db/orch" });
    expect(load).toThrow(ConfigError);
    expect(load).toThrow(/^ORCHESTRATOR_STORE must be sqlite:<file> or postgres:/);
    expect(load).not.toThrow(/hunter2/);
  });

  it("is logged without its password", () => {
    const config = loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE: "postgres://orch:hunter2@db:5432/orch" });
    expect(describeOrchestratorConfig(config).storeUrl).toBe("postgres://***@db:5432/orch");
  });
  it("is read from the file ORCHESTRATOR_STORE_FILE names (a mounted Secret), never echoing what the file holds", () => {
    const url = "postgres://orch:hunter2@db:5432/orch";
    expect(loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_FILE: secretFile(`${url}\n`) }).storeUrl).toBe(url);
    const bad = () =>
      loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_FILE: secretFile("mysql://orch:hunter2@db/orch") });
    expect(bad).toThrow(/^ORCHESTRATOR_STORE_FILE must be sqlite:<file> or postgres:/);
    expect(bad).not.toThrow(/hunter2/);
    expect(() =>
      loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_FILE: secretFile(url), ORCHESTRATOR_STORE: url }),
    ).toThrow(new ConfigError("set ORCHESTRATOR_STORE or ORCHESTRATOR_STORE_FILE, not both"));
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_FILE: join(dir, "missing") })).toThrow(
      /^ORCHESTRATOR_STORE_FILE: cannot read .*missing \(ENOENT\)$/,
    );
  });
});

describe("tool targets", () => {
  it("keeps step traces within half of the 1 GiB emptyDir unless told otherwise, and refuses a cap that holds one file", () => {
    expect(loadOrchestratorConfig(base).traceRetention).toEqual({
      fileBytes: 64 * 2 ** 20,
      totalBytes: 512 * 2 ** 20,
      maxAgeMs: 7 * 24 * 3600_000,
    });
    const tuned = {
      ORCHESTRATOR_TRACE_FILE_BYTES: "1048576",
      ORCHESTRATOR_TRACE_TOTAL_BYTES: "8388608",
      ORCHESTRATOR_TRACE_MAX_AGE_HOURS: "24",
    };
    expect(loadOrchestratorConfig({ ...base, ...tuned }).traceRetention).toEqual({
      fileBytes: 2 ** 20,
      totalBytes: 8 * 2 ** 20,
      maxAgeMs: 24 * 3600_000,
    });
    expect(() => loadOrchestratorConfig({ ...base, ...tuned, ORCHESTRATOR_TRACE_TOTAL_BYTES: "1048576" })).toThrow(
      /ORCHESTRATOR_TRACE_TOTAL_BYTES .* at least twice/,
    );
  });

  it("accepts replica lists of host names and IP literals", () => {
    const config = loadOrchestratorConfig({
      ...base,
      KB_SEARCH_ADDR: "kb-0.kb:50061, kb-1.kb:50061,10.1.2.3:50061,[::1]:50061",
    });
    expect(config.toolTargets["kb-search"]).toEqual([
      "kb-0.kb:50061",
      "kb-1.kb:50061",
      "10.1.2.3:50061",
      "[::1]:50061",
    ]);
  });

  it("accepts one gRPC target such as a dns:/// name of a headless Service", () => {
    const config = loadOrchestratorConfig({
      ...base,
      BILLING_ADDR: "dns:///billing.loopguard.svc.cluster.local:50062",
      RISK_ADDR: "dns://127.0.0.153:5353/risk.loopguard.svc.cluster.local:50063",
    });
    expect(config.toolTargets.billing).toEqual(["dns:///billing.loopguard.svc.cluster.local:50062"]);
    expect(config.toolTargets.risk).toEqual(["dns://127.0.0.153:5353/risk.loopguard.svc.cluster.local:50063"]);
    expect(config.toolTargets["kb-search"]).toEqual(["127.0.0.1:50061"]);
  });

  it("takes tool answers up to 256 KiB unless ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES says otherwise", () => {
    expect(loadOrchestratorConfig(base).maxToolAnswerBytes).toBe(262_144);
    expect(loadOrchestratorConfig({ ...base, ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES: "65536" }).maxToolAnswerBytes).toBe(
      65_536,
    );
  });

  it("hedges the contracts' hedged reads unless ORCHESTRATOR_HEDGED_READS is false, and refuses another value", () => {
    expect(loadOrchestratorConfig(base).hedgedReads).toBe(true);
    expect(loadOrchestratorConfig({ ...base, ORCHESTRATOR_HEDGED_READS: "false" }).hedgedReads).toBe(false);
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_HEDGED_READS: "off" })).toThrow(
      'ORCHESTRATOR_HEDGED_READS must be "true" or "false", got "off"',
    );
  });

  it.each([
    "kb-0.kb",
    "kb-0.kb:0",
    "kb-0.kb:70000",
    "kb_0:50061",
    "a:1,,b:2",
    "-kb:50061",
    "http://127.0.0.1:50061",
    "dns:///kb search:50061",
  ])("refuses %j, naming the variable", (value) => {
    expect(() => loadOrchestratorConfig({ ...base, KB_SEARCH_ADDR: value })).toThrow(ConfigError);
    expect(() => loadOrchestratorConfig({ ...base, KB_SEARCH_ADDR: value })).toThrow(
      /^KB_SEARCH_ADDR must be host:port/,
    );
  });
});

describe("max connection age", () => {
  it("keeps API streams open on aged connections (no grace limit) and lets tools' defaults be overridden", () => {
    const config = loadOrchestratorConfig(base);
    expect(config.maxConnectionAgeMs).toBe(300_000);
    expect(config.maxConnectionAgeGraceMs).toBe(0);
    const tuned = loadOrchestratorConfig({ ...base, ORCHESTRATOR_MAX_CONNECTION_AGE_MS: "60000" });
    expect(tuned.maxConnectionAgeMs).toBe(60_000);
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_MAX_CONNECTION_AGE_GRACE_MS: "soon" })).toThrow(
      /ORCHESTRATOR_MAX_CONNECTION_AGE_GRACE_MS/,
    );
  });
});

describe("fair use: streams, approvals, sessions per caller, store timeouts", () => {
  it("bounds WatchSession streams apart from unary calls, sweeps approvals every second, lets a caller have 2,000 sessions in flight, and bounds PostgreSQL waits at 1 s", () => {
    expect(loadOrchestratorConfig(base)).toMatchObject({
      maxConcurrent: 1024,
      maxStreams: 2048,
      maxStreamsPerCaller: 512,
      approvalSweepMs: 1000,
      maxSessionsPerCaller: 2000,
      storeTimeouts: { connectTimeoutMs: 1000, statementTimeoutMs: 1000 },
    });
    const tuned = loadOrchestratorConfig({
      ...base,
      ORCHESTRATOR_MAX_STREAMS: "100",
      ORCHESTRATOR_APPROVAL_SWEEP_MS: "5000",
      ORCHESTRATOR_STORE_STATEMENT_TIMEOUT_MS: "3000",
      ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: "5",
    });
    expect(tuned).toMatchObject({
      maxStreams: 100,
      maxStreamsPerCaller: 100,
      approvalSweepMs: 5000,
      maxSessionsPerCaller: 5,
      storeTimeouts: { statementTimeoutMs: 3000 },
    });
    expect(loadOrchestratorConfig(base).storePoolSize).toBeUndefined();
    expect(loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_POOL_SIZE: "5" }).storePoolSize).toBe(5);
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_STORE_POOL_SIZE: "0" })).toThrow(
      /ORCHESTRATOR_STORE_POOL_SIZE must be an integer in 1\.\.100/,
    );
  });

  it.each([
    ["ORCHESTRATOR_MAX_STREAMS_PER_CALLER", "4096"],
    ["ORCHESTRATOR_APPROVAL_SWEEP_MS", "0"],
    ["ORCHESTRATOR_STORE_CONNECT_TIMEOUT_MS", "forever"],
    ["ORCHESTRATOR_MAX_SESSIONS_PER_CALLER", "0"],
    ["ORCHESTRATOR_MAX_SESSIONS_PER_CALLER", "2.5"],
    ["ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES", "4194305"],
    ["ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES", "256KiB"],
  ])("refuses %s=%s, naming the variable", (name, value) => {
    expect(() => loadOrchestratorConfig({ ...base, [name]: value })).toThrow(new RegExp(`^${name} must be an integer`));
  });
});

describe("identities", () => {
  it("reads an OIDC provider only with https (or loopback http) and its client id, the roles claim defaulting to loopguard_roles", () => {
    expect(loadOrchestratorConfig(base).oidc).toBeUndefined();
    const oidc = loadOrchestratorConfig({
      ...base,
      ORCHESTRATOR_OIDC_ISSUER: "https://id.example.com",
      ORCHESTRATOR_OIDC_AUDIENCE: "loopguard",
    });
    expect(oidc.oidc).toEqual({
      issuer: "https://id.example.com",
      audience: "loopguard",
      rolesClaim: "loopguard_roles",
    });
    expect(describeOrchestratorConfig(oidc).oidc).toEqual(oidc.oidc);
    expect(() =>
      loadOrchestratorConfig({
        ...base,
        ORCHESTRATOR_OIDC_ISSUER: "http://id.example.com",
        ORCHESTRATOR_OIDC_AUDIENCE: "x",
      }),
    ).toThrow(/^ORCHESTRATOR_OIDC_ISSUER must be an https URL/);
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_OIDC_ISSUER: "https://id.example.com" })).toThrow(
      /ORCHESTRATOR_OIDC_AUDIENCE .* is required/,
    );
  });

  it("refuses to sign tool calls with a key the JWKS binds to a person, or does not hold", () => {
    const people = JSON.parse(TEST_AUTH_ENV.LOOPGUARD_JWKS!) as { keys: Record<string, unknown>[] };
    const orchestratorKid = people.keys.find((k) => k.loopguard_role === "orchestrator")!.kid;
    const asPerson = {
      keys: people.keys.map((k) =>
        k.kid === orchestratorKid ? { ...k, loopguard_role: "person", loopguard_subject: "robot" } : k,
      ),
    };
    expect(() => loadOrchestratorConfig({ ...base, LOOPGUARD_JWKS: JSON.stringify(asPerson) })).toThrow(
      /is bound as person in the JWKS; the orchestrator signs with a key of role orchestrator/,
    );
    const without = { keys: people.keys.filter((k) => k.kid !== orchestratorKid) };
    expect(() => loadOrchestratorConfig({ ...base, LOOPGUARD_JWKS: JSON.stringify(without) })).toThrow(
      /is not in the JWKS/,
    );
  });
});

describe("step retention and the dashboard's series", () => {
  it("keeps ended sessions' step rows 30 days and samples every 10 s unless told otherwise, and names a bad value", () => {
    expect(loadOrchestratorConfig(base).ops).toEqual({
      stepRetentionDays: 30,
      stepRetentionIntervalMs: 3600_000,
      seriesIntervalMs: 10_000,
      traceSampleRatio: 1,
    });
    const tuned = {
      ORCHESTRATOR_STEP_RETENTION_DAYS: "7",
      ORCHESTRATOR_STEP_RETENTION_INTERVAL_S: "60",
      ORCHESTRATOR_SERIES_INTERVAL_MS: "500",
    };
    expect(loadOrchestratorConfig({ ...base, ...tuned }).ops).toEqual({
      stepRetentionDays: 7,
      stepRetentionIntervalMs: 60_000,
      seriesIntervalMs: 500,
      traceSampleRatio: 1,
    });
    expect(() => loadOrchestratorConfig({ ...base, ORCHESTRATOR_STEP_RETENTION_DAYS: "0" })).toThrow(
      /ORCHESTRATOR_STEP_RETENTION_DAYS must be an integer in 1\.\.3660, got "0"/,
    );
  });

  it("keeps the share of session traces OTEL_TRACES_SAMPLER_ARG says for a ratio sampler, and names a ratio outside 0..1", () => {
    expect(
      loadOrchestratorConfig({
        ...base,
        OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG: "0.1",
      }).ops.traceSampleRatio,
    ).toBe(0.1);
    expect(
      loadOrchestratorConfig({ ...base, OTEL_TRACES_SAMPLER: "parentbased_always_off" }).ops.traceSampleRatio,
    ).toBe(0);
    expect(() =>
      loadOrchestratorConfig({ ...base, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "10%" }),
    ).toThrow(/OTEL_TRACES_SAMPLER_ARG must be a ratio in 0\.\.1, got "10%"/);
  });
});

describe("CONFIDENCE_THRESHOLD", () => {
  it("defaults to 0.6, takes a fraction in 0..1 and refuses anything else, naming the variable", () => {
    expect(loadOrchestratorConfig(base).approvals.minConfidence).toBe(0.6);
    expect(loadOrchestratorConfig({ ...base, CONFIDENCE_THRESHOLD: "0.75" }).approvals.minConfidence).toBe(0.75);
    expect(loadOrchestratorConfig({ ...base, CONFIDENCE_THRESHOLD: "0" }).approvals.minConfidence).toBe(0);
    for (const bad of ["1.5", "-0.1", "high", " ", "60%"]) {
      expect(() => loadOrchestratorConfig({ ...base, CONFIDENCE_THRESHOLD: bad })).toThrow(
        `CONFIDENCE_THRESHOLD must be a number in 0..1, got "${bad}"`,
      );
    }
  });
});

describe("OPENAI_BASE_URL", () => {
  it("takes an http(s) URL and refuses anything else or a user and password in it, never echoing the value", () => {
    expect(loadOrchestratorConfig({ ...base, OPENAI_BASE_URL: "http://127.0.0.1:8080/v1" }).openai?.baseUrl).toBe(
      "http://127.0.0.1:8080/v1",
    );
    for (const url of ["llm-proxy.internal/v1", "ftp://llm-proxy.internal/v1", "not a url"]) {
      expect(() => loadOrchestratorConfig({ ...base, OPENAI_BASE_URL: url })).toThrow(
        new ConfigError("OPENAI_BASE_URL must be an http:// or https:// URL"),
      );
    }
    const withUser = () => loadOrchestratorConfig({ ...base, OPENAI_BASE_URL: "https://svc:s3cret@proxy/v1" });
    expect(withUser).toThrow(/^OPENAI_BASE_URL must not carry a user or password/);
    expect(withUser).not.toThrow(/s3cret/);
  });

  it("takes its key from OPENAI_API_KEY_FILE (a mounted Secret) or OPENAI_API_KEY, not both, and never logs it", () => {
    const openai = { ...base, OPENAI_BASE_URL: "https://proxy/v1" };
    const config = loadOrchestratorConfig({ ...openai, OPENAI_API_KEY_FILE: secretFile("sk-from-file\n") });
    expect(config.openai?.apiKey).toBe("sk-from-file");
    expect(JSON.stringify(describeOrchestratorConfig(config))).not.toContain("sk-from-file");
    expect(loadOrchestratorConfig({ ...openai, OPENAI_API_KEY: "sk-inline" }).openai?.apiKey).toBe("sk-inline");
    expect(() =>
      loadOrchestratorConfig({ ...openai, OPENAI_API_KEY_FILE: secretFile("sk-a"), OPENAI_API_KEY: "sk-b" }),
    ).toThrow(new ConfigError("set OPENAI_API_KEY or OPENAI_API_KEY_FILE, not both"));
    expect(() => loadOrchestratorConfig({ ...openai, OPENAI_API_KEY_FILE: secretFile("") })).toThrow(
      /^OPENAI_API_KEY_FILE: .* is empty$/,
    );
  });

  it("is logged without its query string or fragment", () => {
    const config = loadOrchestratorConfig({ ...base, OPENAI_BASE_URL: "https://proxy/v1?api-key=s3cret#x" });
    expect(describeOrchestratorConfig(config).openai).toEqual({ baseUrl: "https://proxy/v1", model: "gpt-4o-mini" });
  });
});
