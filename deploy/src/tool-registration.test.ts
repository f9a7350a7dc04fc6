// A tool is registered in one place, its manifest (services/<tool>/package.json) beside its
// contract: everything else derives from the two. This checks every tool service of the
// workspace has what the suite needs, so a missing piece fails here, not in a cluster.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { discoverServices, requiredScopesOf, servicePolicy, toolServicesOf } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { renderGeneratedFiles } from "./generated-files.js";
import { BASE_SERVICES_DIR } from "./k8s-files.js";
import { LOCAL_ADDRESSES_FILE } from "./local-addresses.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
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
    expect(files.get("deploy/prometheus/rules.yml")).toContain(`name: loopguard-slo-${name}`);
    expect(files.get(join(BASE_SERVICES_DIR, `${name}.yaml`))).toMatch(/kind: Deployment/);
  });
});

it("finds the workspace's tools", () => {
  expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(["billing", "kb-search", "risk"]));
});
