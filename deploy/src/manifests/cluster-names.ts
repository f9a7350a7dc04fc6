// The names the suite's objects use to find each other, in one place: namespaces, label keys and
// values, Service names and ports. The generated manifests, the checks, the local containers'
// DNS and the drills and releases all read them here, so a rename is one edit.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { ObjectMeta } from "kubernetes-types/meta/v1.js";

/** The suite's namespace as the manifests are written; an overlay's `namespace:` renames it. */
export const NAMESPACE = "loopguard";
export const CLUSTER_DOMAIN = "cluster.local";
/** Where Prometheus runs (kube-prometheus and kube-prometheus-stack install it in `monitoring`). */
export const PROMETHEUS_NAMESPACE = "monitoring";
/** Where the CloudNativePG operator runs (its manifests install it in `cnpg-system`). */
export const CNPG_OPERATOR_NAMESPACE = "cnpg-system";

/** The label Kubernetes sets on every Namespace to its name. */
export const NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name";
export const NAME_LABEL = "app.kubernetes.io/name";
export const COMPONENT_LABEL = "app.kubernetes.io/component";
export const PART_OF_LABEL = "app.kubernetes.io/part-of";
export const PART_OF = "loopguard";
/** Every object of the suite carries it. */
export const PART_OF_LABELS = { [PART_OF_LABEL]: PART_OF } as const;
/** Pods in any namespace with this label may call the orchestrator's API and open its dashboard. */
export const API_CLIENT_LABEL = "loopguard/api-client";
/** Pods that open connections to PostgreSQL carry this label; the database's own policy admits them. */
export const POSTGRES_CLIENT_LABEL = "loopguard/postgres-client";

/** ConfigMap (made by the base's configMapGenerator) with the OTEL_* variables every service shares. */
export const TELEMETRY_CONFIG_MAP = "loopguard-telemetry";
export const JWKS_SECRET = "loopguard-jwks/jwks.json";
/** A tool's own call key (derived from the orchestrator's call secrets): that tool's pods alone mount it. */
export function callKeysSecret(tool: string): string {
  return `loopguard-call-keys-${tool}/call-keys.json`;
}

/** The names of a service's two container ports: gRPC and HTTP (/metrics). */
export const PORT_GRPC = "grpc";
export const PORT_HTTP = "http";
export const POSTGRES_PORT = 5432;
export const PROMETHEUS_PORT = 9090;
export const OTLP_HTTP_PORT = 4318;
/** The Service prometheus-operator makes for its Prometheus pods. */
export const PROMETHEUS_SERVICE = "prometheus-operated";
/** The in-cluster Prometheus the release gate queries. */
export const PROMETHEUS_ADDRESS = `http://${PROMETHEUS_SERVICE}.${PROMETHEUS_NAMESPACE}.svc:${PROMETHEUS_PORT}`;

export function appLabels(spec: ServiceSpec): Record<string, string> {
  return { [NAME_LABEL]: spec.name, [COMPONENT_LABEL]: spec.kind, ...PART_OF_LABELS };
}

export function podSelector(spec: ServiceSpec): Record<string, string> {
  return { [NAME_LABEL]: spec.name };
}

/** A service's object in the suite's namespace, labelled as its pods. */
export function serviceMetadata(spec: ServiceSpec, name = spec.name): ObjectMeta & { name: string; namespace: string } {
  return { name, namespace: NAMESPACE, labels: appLabels(spec) };
}

/**
 * The DNS name of a Service, for a caller in the same namespace: the short name, resolved through
 * the pod's search path (its own namespace first), so no object names the namespace the overlay
 * puts the suite in.
 */
export function serviceHost(name: string): string {
  return name;
}
