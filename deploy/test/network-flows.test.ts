// Every NetworkPolicy against the flows the suite really makes (deploy/src/network-flows.ts): in
// every rendering `pnpm check:k8s` makes (each overlay, each optional component on prod, each
// release path with the others), each flow that applies must pass the source's egress and the
// destination's ingress, and each flow that must be stopped is stopped at one end at least. The
// policies are evaluated by deploy/src/network-policy.ts, whose semantics are checked first.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { renderAll, type Rendering } from "../src/manifests/renderings.js";
import { requiredFlows } from "../src/manifests/network-flows.js";
import { blocked, checkFlows, featuresOf, nameOf } from "../src/manifests/network-flows-check.js";
import { connection, namespaceLabels, type PodEndpoint } from "../src/manifests/network-policy.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

describe("the policy evaluator", () => {
  const pod = (labels: Record<string, string>, namespace = "loopguard"): PodEndpoint => ({
    kind: "pod",
    namespace,
    namespaceLabels: namespaceLabels(namespace),
    labels,
  });
  const policy = (spec: NetworkPolicy["spec"], namespace = "loopguard"): NetworkPolicy => ({
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: "p", namespace },
    spec,
  });
  const a = pod({ app: "a" });
  const b = pod({ app: "b" });

  it("allows what no policy isolates, and isolates per direction (policyTypes defaults to Ingress, plus Egress with egress rules)", () => {
    expect(connection([], a, b, 80, "TCP").egress).toMatchObject({ allowed: true, isolated: false });
    const ingressOnly = policy({ podSelector: { matchLabels: { app: "b" } } });
    expect(connection([ingressOnly], a, b, 80, "TCP")).toMatchObject({
      egress: { allowed: true },
      ingress: { allowed: false, isolated: true },
    });
    expect(connection([ingressOnly], b, a, 80, "TCP").egress).toMatchObject({ allowed: true, isolated: false });
  });

  it("reads a podSelector peer in the policy's namespace, a namespaceSelector with a podSelector as their intersection", () => {
    const admit = (from: NetworkPolicy["spec"]) => [policy(from)];
    const fromA = admit({
      podSelector: { matchLabels: { app: "b" } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: "a" } } }] }],
    });
    expect(connection(fromA, a, b, 80, "TCP").ingress.allowed).toBe(true);
    expect(connection(fromA, pod({ app: "a" }, "other"), b, 80, "TCP").ingress.allowed).toBe(false);
    const anyNamespace = admit({
      podSelector: {},
      ingress: [
        {
          from: [
            {
              namespaceSelector: {},
              podSelector: { matchExpressions: [{ key: "app", operator: "In", values: ["a"] }] },
            },
          ],
        },
      ],
    });
    expect(connection(anyNamespace, pod({ app: "a" }, "other"), b, 80, "TCP").ingress.allowed).toBe(true);
    expect(connection(anyNamespace, pod({ app: "c" }, "other"), b, 80, "TCP").ingress.allowed).toBe(false);
  });

  it("matches an ipBlock (with except) against addresses outside the pod network only", () => {
    const egress = [
      policy({
        podSelector: {},
        policyTypes: ["Egress"],
        egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] } }] }],
      }),
    ];
    expect(connection(egress, a, { kind: "address", ip: "10.2.3.4" }, 443, "TCP").egress.allowed).toBe(true);
    expect(connection(egress, a, { kind: "address", ip: "10.1.3.4" }, 443, "TCP").egress.allowed).toBe(false);
    expect(connection(egress, a, { kind: "address", ip: "fd00::1" }, 443, "TCP").egress.allowed).toBe(false);
    expect(connection(egress, a, b, 443, "TCP").egress.allowed).toBe(false);
  });

  it("matches ports by protocol (TCP by default), range and name", () => {
    const egress = [
      policy({
        podSelector: {},
        policyTypes: ["Egress"],
        egress: [{ ports: [{ port: 53, protocol: "UDP" }, { port: 8000, endPort: 8100 }, { port: "grpc" }] }],
      }),
    ];
    const named: PodEndpoint = { ...b, namedPorts: { grpc: { port: 50061, protocol: "TCP" } } };
    expect(connection(egress, a, b, 53, "UDP").egress.allowed).toBe(true);
    expect(connection(egress, a, b, 53, "TCP").egress.allowed).toBe(false);
    expect(connection(egress, a, b, 8050, "TCP").egress.allowed).toBe(true);
    expect(connection(egress, a, named, 50061, "TCP").egress.allowed).toBe(true);
    expect(connection(egress, a, b, 50061, "TCP").egress.allowed).toBe(false);
  });
});

describe("network flows in every rendering", () => {
  it("renders the combinations the flows depend on", () => {
    const all = new Set(renderings.flatMap((r) => [...featuresOf(root, r)]));
    for (const feature of [
      "postgres-stores",
      "cloudnative-pg",
      "llm-egress",
      "oidc-egress",
      "chaos-drills",
      "patrol",
      "argo-rollouts",
      "plain-blue-green",
      "dns-kube-dns-only",
    ])
      expect(all).toContain(feature);
    expect(
      renderings.some((r) => !featuresOf(root, r).has("postgres-stores")),
      "a rendering on SQLite (dev)",
    ).toBe(true);
  });

  it("lets every flow the suite makes through at both ends, stops the flows that must be stopped", () => {
    const report = checkFlows(root, renderings, services);
    expect(report.stopped).toEqual([]);
    expect(report.through).toEqual([]);
    expect(report.checked).toBeGreaterThan(500);
  });

  it("lists every connection to the internet the policies let through: none goes unlisted in the flows table", () => {
    const report = checkFlows(root, renderings, services);
    expect(report.unlisted).toEqual([]);
    const drills = renderings.find((r) => r.name === "overlays/prod + components/chaos-drills")!;
    const withoutWide = checkFlows(root, [drills], services, { wide: false });
    expect(withoutWide.unlisted).toContain(
      "overlays/prod + components/chaos-drills: drill runner Job → the internet 443/TCP is allowed and listed nowhere",
    );
  });

  it("lets the orchestrator reach an OpenID Connect issuer on 443 with oidc-egress, and not without it", () => {
    const toIssuer = requiredFlows(services).filter((f) => f.when === "oidc-egress");
    expect(toIssuer.map((f) => `${nameOf(f.from)} → ${nameOf(f.to)} ${f.ports.map((p) => p.port)}`)).toEqual([
      "orchestrator → an OpenID Connect issuer 443",
    ]);
    const prod = renderings.find((r) => r.name === "overlays/prod")!;
    const withOidc = renderings.find((r) => r.name === "overlays/prod + components/oidc-egress")!;
    expect(toIssuer.flatMap((f) => blocked(f, withOidc).failures)).toEqual([]);
    expect(toIssuer.flatMap((f) => blocked(f, prod).failures)).toEqual([
      "overlays/prod: orchestrator → an OpenID Connect issuer 443/TCP stopped at egress",
    ]);
  });

  it("loses DNS without the allow-dns policy, and NodeLocal DNSCache with the kube-dns-only rule: the checks can fail", () => {
    const dev = renderings.find((r) => r.name === "overlays/dev")!;
    const withoutDns = {
      ...dev,
      objects: dev.objects.filter((o) => !(o.kind === "NetworkPolicy" && o.metadata.name === "allow-dns")),
    };
    const dns = requiredFlows(services).filter(
      (f) => f.to !== undefined && "pods" in f.to && f.to.pods.startsWith("kube-dns") && "workload" in f.from,
    );
    expect(dns.flatMap((f) => blocked(f, withoutDns).failures).length).toBeGreaterThan(0);
    const tight = renderings.find(
      (r) => r.name.includes("components/dns-kube-dns-only") && !r.name.includes("argo") && !r.name.includes("plain"),
    )!;
    const nodeLocal = requiredFlows(services).filter(
      (f) => f.unless === "dns-kube-dns-only" && "address" in f.to && "workload" in f.from,
    );
    expect(nodeLocal.flatMap((f) => blocked(f, tight).failures)).toContain(
      `${tight.name}: orchestrator → NodeLocal DNSCache (host network) 53/UDP stopped at egress`,
    );
  });
});
