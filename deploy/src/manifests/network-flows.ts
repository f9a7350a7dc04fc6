// The connections the suite really makes, as data: what the NetworkPolicies must let through (at
// both ends) and some they must stop, in each rendering. Derived from the services' manifests
// (kinds, ports, stateful) and the constants the objects are built from; the flow test
// (deploy/test/network-flows.test.ts) checks every rendering against them with network-policy.ts,
// and `pnpm gen` writes them as a table into docs/kubernetes.md.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import {
  API_CLIENT_LABEL,
  CNPG_OPERATOR_NAMESPACE,
  NAMESPACE,
  OTLP_HTTP_PORT,
  POSTGRES_PORT,
  PROMETHEUS_NAMESPACE,
  PROMETHEUS_PORT,
  PART_OF_LABELS,
} from "./cluster-names.js";
import { PROMETHEUS_PEER } from "./monitoring-objects.js";
import { SMOKE_LABEL } from "./smoke-objects.js";
import type { Protocol } from "./network-policy.js";
import { PATROL_LABELS } from "./patrol-objects.js";

/** Optional components a flow depends on (a rendering's overlay or added components). */
export type Feature =
  | "postgres-stores"
  | "cloudnative-pg"
  | "llm-egress"
  | "chaos-drills"
  | "patrol"
  | "argo-rollouts"
  | "plain-blue-green"
  | "dns-kube-dns-only";

/** One end of a flow. */
export type EndpointRef =
  /** Every pod of a workload in the rendering (both colours of a tool on the plain release path), with its rendered labels. */
  | { readonly workload: string }
  /** Pods the rendering does not run (Prometheus, cluster DNS, Jobs made at run time), by their labels. */
  | { readonly pods: string; readonly namespace: string; readonly labels: Readonly<Record<string, string>> }
  /** An address outside the pod network; documentation addresses (RFC 5737) stand for real ones. */
  | { readonly address: string; readonly name: string };

export interface Port {
  readonly port: number;
  readonly protocol: Protocol;
}

export interface Flow {
  readonly from: EndpointRef;
  readonly to: EndpointRef;
  readonly ports: readonly Port[];
  readonly why: string;
  /** Only where this component is in the rendering. */
  readonly when?: Feature | "release-path";
  /** Not where this component is. */
  readonly unless?: Feature;
}

const tcp = (...ports: number[]): Port[] => ports.map((port) => ({ port, protocol: "TCP" }));
const both = (port: number): Port[] => [
  { port, protocol: "UDP" },
  { port, protocol: "TCP" },
];

const PROMETHEUS: EndpointRef = {
  pods: "Prometheus",
  namespace: PROMETHEUS_NAMESPACE,
  labels: PROMETHEUS_PEER.podSelector!.matchLabels!,
};
const COLLECTOR: EndpointRef = { workload: "otel-collector" };
const KUBE_DNS: EndpointRef = {
  pods: "kube-dns / CoreDNS",
  namespace: "kube-system",
  labels: { "k8s-app": "kube-dns" },
};
const NODE_LOCAL_DNS: EndpointRef = { address: "169.254.20.10", name: "NodeLocal DNSCache (host network)" };
const OPENSHIFT_DNS: EndpointRef = {
  pods: "OpenShift DNS",
  namespace: "openshift-dns",
  labels: { "dns.operator.openshift.io/daemonset-dns": "default" },
};
const KUBERNETES_API: EndpointRef = { address: "192.0.2.1", name: "Kubernetes API server" };
const TRACING_BACKEND: EndpointRef = { address: "192.0.2.40", name: "tracing backend" };
const MANAGED_POSTGRES: EndpointRef = { address: "198.51.100.20", name: "PostgreSQL outside the cluster" };
const CNPG_INSTANCES: EndpointRef = {
  pods: "CloudNativePG instances",
  namespace: NAMESPACE,
  labels: { "cnpg.io/cluster": "loopguard-postgres" },
};
const CNPG_OPERATOR: EndpointRef = {
  pods: "CloudNativePG operator",
  namespace: CNPG_OPERATOR_NAMESPACE,
  labels: { "app.kubernetes.io/name": "cloudnative-pg" },
};
const LLM_ENDPOINT: EndpointRef = { address: "203.0.113.30", name: "an OpenAI-compatible endpoint" };
const INTERNET: EndpointRef = { address: "203.0.113.80", name: "the internet" };
const OUTSIDE_RESOLVER: EndpointRef = { address: "203.0.113.53", name: "a resolver outside the cluster" };
const API_CLIENT: EndpointRef = { pods: "API clients", namespace: "ingress", labels: { [API_CLIENT_LABEL]: "true" } };
const UNLABELLED: EndpointRef = {
  pods: "a pod without the api-client label",
  namespace: "default",
  labels: { app: "curl" },
};
/** The drill runner Job of the chaos-drills component (its label is fixed by issue 21's drills part). */
// Its pods carry the API client label: the orchestrator admits them as it admits any API client.
const DRILL_RUNNER: EndpointRef = {
  pods: "drill runner Job",
  namespace: NAMESPACE,
  labels: { "app.kubernetes.io/name": "drill-runner", [API_CLIENT_LABEL]: "true" },
};
/** The patrol CronJob's pods (components/patrol): an API client of the orchestrator's gRPC port, nothing else. */
const PATROL: EndpointRef = {
  pods: "patrol CronJob",
  namespace: NAMESPACE,
  labels: { "app.kubernetes.io/name": PATROL_LABELS["app.kubernetes.io/name"], [API_CLIENT_LABEL]: "true" },
};

export function smokePods(tool: string): EndpointRef {
  return {
    pods: `${tool} smoke Jobs`,
    namespace: NAMESPACE,
    labels: {
      [SMOKE_LABEL]: tool,
      "app.kubernetes.io/component": "smoke-check",
      ...PART_OF_LABELS,
    },
  };
}

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
      ...(s.kind === "orchestrator" ? { unless: "llm-egress" as const } : {}),
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

export const FLOWS_DOC = "docs/kubernetes.md";
const BEGIN = "<!-- network flows: written by `pnpm gen` from deploy/src/manifests/network-flows.ts; do not edit -->";
const END = "<!-- end of network flows -->";

function describe(ref: EndpointRef): string {
  if ("workload" in ref) return ref.workload;
  if ("address" in ref) return `${ref.name} (${ref.address})`;
  // The first label is the one that tells these pods apart.
  const [key, value] = Object.entries(ref.labels)[0]!;
  return `${ref.pods} (${ref.namespace === NAMESPACE ? "" : `ns ${ref.namespace}, `}${key}=${value})`;
}

function condition(flow: Flow): string {
  const parts = [
    ...(flow.when ? [flow.when === "release-path" ? "with a release path" : `with \`${flow.when}\``] : []),
    ...(flow.unless ? [`not with \`${flow.unless}\``] : []),
  ];
  return parts.join("; ") || "always";
}

/** Rows with the same destination, ports, reason and condition merged into one, their sources listed together. */
function table(flows: readonly Flow[]): string[] {
  const rows = new Map<string, { from: string[]; cells: string[] }>();
  for (const flow of flows) {
    const cells = [
      describe(flow.to),
      flow.ports.map((p) => `${p.port}/${p.protocol}`).join(", "),
      condition(flow),
      flow.why,
    ];
    const key = cells.join("|");
    const row = rows.get(key) ?? { from: [], cells };
    row.from.push(describe(flow.from));
    rows.set(key, row);
  }
  return [
    "| From | To | Port | Where | Why |",
    "|---|---|---|---|---|",
    ...[...rows.values()].map((r) => `| ${[r.from.join(", "), ...r.cells].join(" | ")} |`),
  ];
}

/** docs/kubernetes.md with its flows section rewritten between the markers. */
export function renderFlowsDoc(current: string, services: readonly ServiceSpec[]): string {
  const start = current.indexOf(BEGIN);
  const end = current.indexOf(END);
  if (start < 0 || end < start) throw new Error(`${FLOWS_DOC}: the markers of the network flows section are missing`);
  const section = [
    BEGIN,
    "",
    "Allowed (both ends: the source's egress and the destination's ingress):",
    "",
    ...table(requiredFlows(services)),
    "",
    "Denied (checked too, so a policy that opens too much fails):",
    "",
    ...table(deniedFlows(services)),
    "",
    "",
  ].join("\n");
  return `${current.slice(0, start)}${section}${current.slice(end)}`;
}
