// The connections the suite really makes, as data: what the NetworkPolicies must let through (at
// both ends) and some they must stop, in each rendering. Derived from the services' manifests
// (kinds, ports, stateful) and the constants the objects are built from; the flow test
// (deploy/test/network-flows.test.ts) checks every rendering against them with network-policy.ts,
// and `pnpm gen` writes them as a table into docs/kubernetes.md.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { OTLP_HTTP_PORT, POSTGRES_PORT, PROMETHEUS_PORT } from "./cluster-names.js";
import {
  API_CLIENT,
  both,
  CNPG_INSTANCES,
  CNPG_OPERATOR,
  COLLECTOR,
  DRILL_RUNNER,
  type EndpointRef,
  type Flow,
  INTERNET,
  KUBE_DNS,
  KUBERNETES_API,
  LLM_ENDPOINT,
  MANAGED_POSTGRES,
  NODE_LOCAL_DNS,
  OIDC_ISSUER,
  OPENSHIFT_DNS,
  OUTSIDE_RESOLVER,
  PATROL,
  PROMETHEUS,
  smokePods,
  TRACING_BACKEND,
  tcp,
  UNLABELLED,
} from "./network-endpoints.js";
/** Every connection the policies must allow. */
export function requiredFlows(services: readonly ServiceSpec[]): Flow[] {
  const tools = services.filter((s) => s.kind === "tool");
  const orchestrators = services.filter((s) => s.kind === "orchestrator");
  const us = (s: ServiceSpec): EndpointRef => ({ workload: s.name });
  const clients: { ref: EndpointRef; when?: Flow["when"] }[] = [
    ...services.map((s) => ({ ref: us(s) })),
    { ref: COLLECTOR },
    ...tools.map((t) => ({ ref: smokePods(t.name), when: "release-path" as const })),
    { ref: DRILL_RUNNER, when: "chaos-drills" as const },
    { ref: PATROL, when: "patrol" as const },
  ];
  const dns = clients.flatMap(({ ref, when }) => [
    { from: ref, to: KUBE_DNS, ports: both(53), why: "name lookups (cluster DNS pods)", ...(when ? { when } : {}) },
    {
      from: ref,
      to: NODE_LOCAL_DNS,
      ports: both(53),
      why: "name lookups through NodeLocal DNSCache",
      unless: "dns-kube-dns-only" as const,
      ...(when ? { when } : {}),
    },
    {
      from: ref,
      to: OPENSHIFT_DNS,
      ports: both(5353),
      why: "name lookups on OpenShift (the Service's 53 is the pods' 5353)",
      unless: "dns-kube-dns-only" as const,
      ...(when ? { when } : {}),
    },
  ]);
  return [
    ...orchestrators.flatMap((o) =>
      tools.map((t) => ({ from: us(o), to: us(t), ports: tcp(t.port), why: `tool calls (${t.envPrefix}_ADDR)` })),
    ),
    ...orchestrators.map((o) => ({
      from: API_CLIENT,
      to: us(o),
      ports: tcp(o.port, o.metricsPort),
      why: "API, dashboard (pods labelled loopguard/api-client)",
    })),
    ...services.map((s) => ({ from: PROMETHEUS, to: us(s), ports: tcp(s.metricsPort), why: "scrape /metrics" })),
    ...services.map((s) => ({ from: us(s), to: COLLECTOR, ports: tcp(OTLP_HTTP_PORT), why: "traces (OTLP/HTTP)" })),
    {
      from: COLLECTOR,
      to: TRACING_BACKEND,
      ports: tcp(4317, OTLP_HTTP_PORT, 443, 3100),
      why: "export traces and step logs (Loki's OTLP on 3100)",
    },
    { from: COLLECTOR, to: KUBERNETES_API, ports: tcp(443, 6443), why: "k8sattributes: pod metadata for spans" },
    ...dns,
    ...services
      .filter((s) => s.stateful)
      .flatMap((s) => [
        {
          from: us(s),
          to: MANAGED_POSTGRES,
          ports: tcp(POSTGRES_PORT),
          why: "store (DSN from loopguard-<service>-store)",
          when: "postgres-stores" as const,
        },
        {
          from: us(s),
          to: CNPG_INSTANCES,
          ports: tcp(POSTGRES_PORT),
          why: "store on the in-cluster database",
          when: "cloudnative-pg" as const,
        },
      ]),
    {
      from: CNPG_INSTANCES,
      to: CNPG_INSTANCES,
      ports: tcp(POSTGRES_PORT),
      why: "streaming replication",
      when: "cloudnative-pg",
    },
    {
      from: CNPG_OPERATOR,
      to: CNPG_INSTANCES,
      ports: tcp(8000),
      why: "the operator reads each instance's status",
      when: "cloudnative-pg",
    },
    {
      from: PROMETHEUS,
      to: CNPG_INSTANCES,
      ports: tcp(9187),
      why: "scrape PostgreSQL metrics",
      when: "cloudnative-pg",
    },
    {
      from: CNPG_INSTANCES,
      to: KUBERNETES_API,
      ports: tcp(443, 6443),
      why: "instance manager",
      when: "cloudnative-pg",
    },
    ...orchestrators.map((o) => ({
      from: us(o),
      to: LLM_ENDPOINT,
      ports: tcp(443),
      why: "the `openai` policy",
      when: "llm-egress" as const,
    })),
    ...orchestrators.map((o) => ({
      from: us(o),
      to: OIDC_ISSUER,
      ports: tcp(443),
      why: "people's ID tokens: the issuer's discovery document and jwks_uri (ORCHESTRATOR_OIDC_ISSUER)",
      when: "oidc-egress" as const,
    })),
    ...tools.map((t) => ({
      from: smokePods(t.name),
      to: us(t),
      ports: tcp(t.port),
      why: "release gate smoke calls",
      when: "release-path" as const,
    })),
    ...orchestrators.map((o) => ({
      from: DRILL_RUNNER,
      to: us(o),
      ports: tcp(o.port, o.metricsPort),
      why: "drill load and audit",
      when: "chaos-drills" as const,
    })),
    ...tools
      .filter((t) => t.name === "billing")
      .map((t) => ({
        from: DRILL_RUNNER,
        to: us(t),
        ports: tcp(t.port),
        why: "the drill's ledger audit",
        when: "chaos-drills" as const,
      })),
    {
      from: DRILL_RUNNER,
      to: PROMETHEUS,
      ports: tcp(PROMETHEUS_PORT),
      why: "replicas' counters (--prometheus)",
      when: "chaos-drills",
    },
    {
      from: DRILL_RUNNER,
      to: KUBERNETES_API,
      ports: tcp(443, 6443),
      why: "PodChaos, pods, EndpointSlices",
      when: "chaos-drills",
    },
    ...orchestrators.map((o) => ({
      from: PATROL,
      to: us(o),
      ports: tcp(o.port),
      why: "the golden set's sessions and the run's record",
      when: "patrol" as const,
    })),
  ];
}

/** Connections the policies must stop: what a compromised or mislabelled pod would try. */
export function deniedFlows(services: readonly ServiceSpec[]): Flow[] {
  const tools = services.filter((s) => s.kind === "tool");
  const orchestrators = services.filter((s) => s.kind === "orchestrator");
  const us = (s: ServiceSpec): EndpointRef => ({ workload: s.name });
  return [
    ...tools.flatMap((a) =>
      tools
        .filter((b) => b !== a)
        .map((b) => ({ from: us(a), to: us(b), ports: tcp(b.port), why: "tools never call each other" })),
    ),
    ...tools.flatMap((t) =>
      orchestrators.map((o) => ({
        from: us(t),
        to: us(o),
        ports: tcp(o.port, o.metricsPort),
        why: "tools never call the orchestrator",
      })),
    ),
    ...orchestrators.map((o) => ({
      from: UNLABELLED,
      to: us(o),
      ports: tcp(o.port, o.metricsPort),
      why: "the API only for labelled clients",
    })),
    ...tools.map((t) => ({ from: UNLABELLED, to: us(t), ports: tcp(t.port), why: "tools only for the orchestrator" })),
    ...tools.map((t) => ({
      from: PROMETHEUS,
      to: us(t),
      ports: tcp(t.port),
      why: "Prometheus scrapes, it does not call",
    })),
    ...services.map((s) => ({
      from: us(s),
      to: INTERNET,
      ports: tcp(443, 80),
      why: "no internet egress",
      ...(s.kind === "orchestrator" ? { unless: ["llm-egress", "oidc-egress"] as const } : {}),
    })),
    ...services
      .filter((s) => !s.stateful)
      .map((s) => ({ from: us(s), to: MANAGED_POSTGRES, ports: tcp(POSTGRES_PORT), why: "no store, no database" })),
    ...services
      .filter((s) => s.stateful)
      .map((s) => ({
        from: us(s),
        to: MANAGED_POSTGRES,
        ports: tcp(POSTGRES_PORT),
        why: "SQLite here",
        unless: "postgres-stores" as const,
      })),
    ...tools.flatMap((a) =>
      tools
        .filter((b) => b !== a)
        .map((b) => ({
          from: smokePods(a.name),
          to: us(b),
          ports: tcp(b.port),
          why: "a smoke Job reaches its own tool only",
          when: "release-path" as const,
        })),
    ),
    ...services.map((s) => ({
      from: us(s),
      to: OUTSIDE_RESOLVER,
      ports: both(53),
      why: "only the cluster's DNS",
      when: "dns-kube-dns-only" as const,
    })),
    ...orchestrators.map((o) => ({
      from: PATROL,
      to: us(o),
      ports: tcp(o.metricsPort),
      why: "the patrol calls the API, it reads no metrics",
      when: "patrol" as const,
    })),
    ...tools.map((t) => ({
      from: PATROL,
      to: us(t),
      ports: tcp(t.port),
      why: "the patrol goes through the orchestrator",
      when: "patrol" as const,
    })),
    {
      from: PATROL,
      to: KUBERNETES_API,
      ports: tcp(443, 6443),
      why: "the patrol has no API token and no business there",
      when: "patrol",
    },
    { from: PATROL, to: INTERNET, ports: tcp(443, 80), why: "no internet egress", when: "patrol" },
  ];
}
