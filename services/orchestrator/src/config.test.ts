import { ConfigError } from "@loopguard/tool-sdk";
import { TEST_AUTH_ENV, testSigningKeyFile } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { describeOrchestratorConfig, loadOrchestratorConfig } from "./config.js";

const base = { ...TEST_AUTH_ENV, LOOPGUARD_SIGNING_KEY_FILE: testSigningKeyFile(), LOOPGUARD_DATA_DIR: "/var/lib/loopguard" };

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
});
