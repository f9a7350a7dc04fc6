// The real orchestrator process given a model endpoint URL that carries a credential: refused at
// start when it is a user and password, never written to the start-up log when it is a query key.
import { spawnSync } from "node:child_process";
import { kill, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { spawnTool, TEST_AUTH_ENV, testOrchestratorEnv, workspaceService } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";

const started: ServiceProcess[] = [];
const dirs: (() => void)[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((p) => kill(p)));
  for (const remove of dirs.splice(0)) remove();
});

function env(url: string): Record<string, string> {
  const data = tempDir("openai-url-config");
  dirs.push(data.remove);
  return {
    ...testOrchestratorEnv(),
    LOOPGUARD_DATA_DIR: data.dir,
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    KB_SEARCH_ADDR: "127.0.0.1:1",
    BILLING_ADDR: "127.0.0.1:1",
    RISK_ADDR: "127.0.0.1:1",
    OPENAI_BASE_URL: url,
    OPENAI_API_KEY: "sk-live-THEAPIKEY",
  };
}

describe("OPENAI_BASE_URL at start", () => {
  it("with a key in its query string: serves, and logs the URL without the query (nor the API key)", async () => {
    const proc = await spawnTool(
      workspaceService("orchestrator").entry,
      env("https://llm-proxy.internal/v1?api-key=sk-live-URLSECRET"),
    );
    started.push(proc);
    const configLine = proc.lines.find((l) => JSON.stringify(l).includes("llm-proxy.internal")) as {
      config?: { openai?: unknown };
    };
    expect(configLine?.config?.openai).toEqual({ baseUrl: "https://llm-proxy.internal/v1", model: "gpt-4o-mini" });
    expect(JSON.stringify(proc.lines)).not.toMatch(/URLSECRET|THEAPIKEY/);
  });

  it("with a user and password in it: exit 2 before serving, one line naming the variable and not the password", () => {
    const run = spawnSync(process.execPath, [workspaceService("orchestrator").entry], {
      env: { ...process.env, ...TEST_AUTH_ENV, ...env("https://svc:sk-live-URLSECRET@llm-proxy.internal/v1") },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.status).toBe(2);
    const lines = run.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("OPENAI_BASE_URL must not carry a user or password");
    expect(run.stderr + run.stdout).not.toContain("URLSECRET");
  });
});
