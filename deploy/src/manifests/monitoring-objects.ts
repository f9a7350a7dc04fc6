// Prometheus's view of the suite: who may scrape, what it scrapes (a ServiceMonitor per service) and
// the SLO rule groups as a PrometheusRule.
import type { IPrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import type { IServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { NetworkPolicyPeer } from "kubernetes-types/networking/v1.js";
import {
  NAME_LABEL,
  NAMESPACE,
  NAMESPACE_NAME_LABEL,
  PART_OF_LABELS,
  PORT_HTTP,
  PROMETHEUS_NAMESPACE,
  podSelector,
  serviceMetadata,
} from "./cluster-names.js";
import type { RuleFile } from "./slo-rules.js";

/** Where Prometheus runs (kube-prometheus and kube-prometheus-stack defaults); its pods may scrape the HTTP ports. */
export const PROMETHEUS_PEER: NetworkPolicyPeer = {
  namespaceSelector: { matchLabels: { [NAMESPACE_NAME_LABEL]: PROMETHEUS_NAMESPACE } },
  podSelector: { matchLabels: { [NAME_LABEL]: "prometheus" } },
};

/**
 * prometheus-operator scrapes a Service's not-ready pods too (a pod starting, waiting for its
 * schema, terminating), whose failed scrapes would read as a tool down: these drop them. Its
 * Endpoints role (the default) and EndpointSlice role name readiness differently, and a ServiceMonitor
 * may be read under either, so each label drops "false"; an unset EndpointSlice condition means ready.
 */
const READY_ONLY = [
  "__meta_kubernetes_endpoint_ready",
  "__meta_kubernetes_endpointslice_endpoint_conditions_ready",
].map((label) => ({ sourceLabels: [label], regex: "false", action: "drop" as const }));

/** Scrapes /metrics on the HTTP port of ready pods; prometheus-operator names the job after the Service, the tool name the Down alerts watch. */
export function serviceMonitor(spec: ServiceSpec): IServiceMonitor {
  return {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "ServiceMonitor",
    metadata: serviceMetadata(spec),
    spec: {
      selector: { matchLabels: podSelector(spec) },
      endpoints: [{ port: PORT_HTTP, path: "/metrics", interval: "15s", relabelings: READY_ONLY }],
    },
  };
}

/** The same rule groups as deploy/prometheus/rules/ (a file per group there, all in one object here). */
export function prometheusRule(rules: RuleFile): IPrometheusRule {
  return {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "PrometheusRule",
    metadata: { name: "loopguard-slo", namespace: NAMESPACE, labels: { ...PART_OF_LABELS } },
    spec: {
      groups: rules.groups.map((group) => ({
        name: group.name,
        rules: group.rules as NonNullable<IPrometheusRule["spec"]["groups"]>[number]["rules"],
      })),
    },
  };
}
