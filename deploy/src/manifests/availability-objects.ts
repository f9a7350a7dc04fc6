// How many pods a service runs and how many may be down at once: its autoscaler and disruption budget.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.js";
import { podSelector, serviceMetadata } from "./cluster-names.js";

/** The autoscaler's bound; the PostgreSQL connection budget (postgres-budget.ts) is derived from it. */
export function maxReplicas(spec: ServiceSpec): number {
  return spec.kind === "orchestrator" ? 6 : 10;
}

export function horizontalPodAutoscaler(spec: ServiceSpec): HorizontalPodAutoscaler {
  return {
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: serviceMetadata(spec),
    spec: {
      scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: spec.name },
      minReplicas: 2,
      maxReplicas: maxReplicas(spec),
      metrics: [
        { type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } },
      ],
      behavior: {
        scaleUp: { stabilizationWindowSeconds: 0, policies: [{ type: "Pods", value: 2, periodSeconds: 30 }] },
        scaleDown: { stabilizationWindowSeconds: 300, policies: [{ type: "Pods", value: 1, periodSeconds: 60 }] },
      },
    },
  };
}

export function podDisruptionBudget(spec: ServiceSpec): PodDisruptionBudget {
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: serviceMetadata(spec),
    spec: {
      maxUnavailable: 1,
      selector: { matchLabels: podSelector(spec) },
      // A crash-looping pod must not block a node drain.
      unhealthyPodEvictionPolicy: "AlwaysAllow",
    },
  };
}
