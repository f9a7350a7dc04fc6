// The ends of the suite's connections (network-flows.ts): its pods, by labels and namespace, and
// the places outside the cluster they reach, by a documentation address standing in for them.
import {
  API_CLIENT_LABEL,
  CNPG_OPERATOR_NAMESPACE,
  NAMESPACE,
  PROMETHEUS_NAMESPACE,
  PART_OF_LABELS,
} from "./cluster-names.js";
import { PROMETHEUS_PEER } from "./monitoring-objects.js";
import { PATROL_LABELS } from "./patrol-objects.js";
import type { Protocol } from "./network-policy.js";
import { SMOKE_LABEL } from "./smoke-objects.js";

/** Optional components a flow depends on (a rendering's overlay or added components). */
export type Feature =
  | "postgres-stores"
  | "cloudnative-pg"
  | "llm-egress"
  | "oidc-egress"
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
  /** Not where this component is (any of these, for a list). */
  readonly unless?: Feature | readonly Feature[];
}

export const tcp = (...ports: number[]): Port[] => ports.map((port) => ({ port, protocol: "TCP" }));
export const both = (port: number): Port[] => [
  { port, protocol: "UDP" },
  { port, protocol: "TCP" },
];

export const PROMETHEUS: EndpointRef = {
  pods: "Prometheus",
  namespace: PROMETHEUS_NAMESPACE,
  labels: PROMETHEUS_PEER.podSelector!.matchLabels!,
};
export const COLLECTOR: EndpointRef = { workload: "otel-collector" };
export const KUBE_DNS: EndpointRef = {
  pods: "kube-dns / CoreDNS",
  namespace: "kube-system",
  labels: { "k8s-app": "kube-dns" },
};
export const NODE_LOCAL_DNS: EndpointRef = { address: "169.254.20.10", name: "NodeLocal DNSCache (host network)" };
export const OPENSHIFT_DNS: EndpointRef = {
  pods: "OpenShift DNS",
  namespace: "openshift-dns",
  labels: { "dns.operator.openshift.io/daemonset-dns": "default" },
};
export const KUBERNETES_API: EndpointRef = { address: "192.0.2.1", name: "Kubernetes API server" };
export const TRACING_BACKEND: EndpointRef = { address: "192.0.2.40", name: "tracing backend" };
export const MANAGED_POSTGRES: EndpointRef = { address: "198.51.100.20", name: "PostgreSQL outside the cluster" };
export const CNPG_INSTANCES: EndpointRef = {
  pods: "CloudNativePG instances",
  namespace: NAMESPACE,
  labels: { "cnpg.io/cluster": "loopguard-postgres" },
};
export const CNPG_OPERATOR: EndpointRef = {
  pods: "CloudNativePG operator",
  namespace: CNPG_OPERATOR_NAMESPACE,
  labels: { "app.kubernetes.io/name": "cloudnative-pg" },
};
export const LLM_ENDPOINT: EndpointRef = { address: "203.0.113.30", name: "an OpenAI-compatible endpoint" };
export const OIDC_ISSUER: EndpointRef = { address: "203.0.113.31", name: "an OpenID Connect issuer" };
export const INTERNET: EndpointRef = { address: "203.0.113.80", name: "the internet" };
export const OUTSIDE_RESOLVER: EndpointRef = { address: "203.0.113.53", name: "a resolver outside the cluster" };
export const API_CLIENT: EndpointRef = {
  pods: "API clients",
  namespace: "ingress",
  labels: { [API_CLIENT_LABEL]: "true" },
};
export const UNLABELLED: EndpointRef = {
  pods: "a pod without the api-client label",
  namespace: "default",
  labels: { app: "curl" },
};
/** The drill runner Job of the chaos-drills component (its label is fixed by issue 21's drills part). */
// Its pods carry the API client label: the orchestrator admits them as it admits any API client.
export const DRILL_RUNNER: EndpointRef = {
  pods: "drill runner Job",
  namespace: NAMESPACE,
  labels: { "app.kubernetes.io/name": "drill-runner", [API_CLIENT_LABEL]: "true" },
};
/** The patrol CronJob's pods (components/patrol): an API client of the orchestrator's gRPC port, nothing else. */
export const PATROL: EndpointRef = {
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
