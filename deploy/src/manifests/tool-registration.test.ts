// A tool is registered in one place, its manifest (services/<tool>/package.json) beside its
// contract: everything else derives from the two. This checks every tool service of the
// workspace has what the suite needs, so a missing piece fails here, not in a cluster.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { discoverServices, requiredScopesOf, servicePolicy, toolServicesOf } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { renderGeneratedFiles } from "./generated-files.js";
import { BASE_SERVICES_DIR } from "./generated-components.js";
import { pascalCase } from "./alert-conventions.js";
import { ruleFileOf, sloAlertTestsOf } from "./prometheus-files.js";
import { LOCAL_ADDRESSES_FILE, renderLocalToolAddresses } from "../local/tool-addresses.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const tools = discoverServices(join(repoRoot, "services")).filter((s) => s.kind === "tool");
const { files } = renderGeneratedFiles(repoRoot, contractFiles);

describe.each(tools.map((t) => [t.name, t] as const))("tool service %s", (name, spec) => {
  const contract = toolServicesOf(contractFiles).find((s) => servicePolicy(s).toolName === name);

  it("has a contract whose tool name is its folder name, so the orchestrator's client registry and its scopes include it", () => {
    expect(contract, `no contract in contractFiles with tool_name "${name}"`).toBeDefined();
    expect(requiredScopesOf([contract!]).length).toBeGreaterThan(0);
  });

  it("has a local address from its manifest's port, and its address variable in the orchestrator's Kubernetes objects", () => {
    expect(files.get(LOCAL_ADDRESSES_FILE)).toContain(`${JSON.stringify(name)}: "127.0.0.1:${spec.port}"`);
    expect(files.get(join(BASE_SERVICES_DIR, "orchestrator.yaml"))).toContain(`name: ${spec.envPrefix}_ADDR`);
  });

  it("has SLO rules and Kubernetes objects", () => {
    expect(files.get(ruleFileOf(`loopguard-slo-${name}`))).toContain(`name: loopguard-slo-${name}`);
    expect(files.get(sloAlertTestsOf(name))).toContain(`alertname: ${pascalCase(name)}Down`);
    expect(files.get(join(BASE_SERVICES_DIR, `${name}.yaml`))).toMatch(/kind: Deployment/);
  });
});

it("finds the workspace's tools", () => {
  expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(["billing", "kb-search", "risk"]));
});

it("follows docs/adding-a-tool.md step 2 on a copy of services/billing: the new tool is discovered, with its local address", () => {
  const workspace = mkdtempSync(join(tmpdir(), "loopguard-new-tool-"));
  try {
    const geo = join(workspace, "services", "geo");
    cpSync(join(repoRoot, "services", "billing", "package.json"), join(geo, "package.json"));
    const manifest = JSON.parse(readFileSync(join(geo, "package.json"), "utf8")) as {
      name: string;
      description: string;
      loopguard: Record<string, unknown>;
    };
    writeFileSync(
      join(geo, "package.json"),
      JSON.stringify({
        ...manifest,
        name: "@loopguard/geo",
        description: "Places.",
        loopguard: { ...manifest.loopguard, port: 50064, metricsPort: 9464, envPrefix: "GEO", stateful: false },
      }),
    );
    const [spec] = discoverServices(join(workspace, "services"));
    expect(spec).toMatchObject({
      name: "geo",
      packageName: "@loopguard/geo",
      kind: "tool",
      port: 50064,
      metricsPortEnv: "GEO_METRICS_PORT",
      entry: join(geo, "dist", "main.js"),
    });
    expect(renderLocalToolAddresses([spec!]).get(LOCAL_ADDRESSES_FILE)).toContain('"geo": "127.0.0.1:50064"');
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
});
