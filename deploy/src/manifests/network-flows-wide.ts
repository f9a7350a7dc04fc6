// Connections the NetworkPolicies let through though the suite needs less: egress whose real end
// (the Kubernetes API server, a tracing backend, an LLM endpoint, an OIDC issuer) has an address
// that differs per cluster, so the shipped policies name none and allow the port to any address.
// Listed so the flows table says so; the check holds the list to what the policies allow, and every
// connection to the internet they allow to a listed one. Narrow each with an ipBlock patch in your
// overlay.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { CNPG_INSTANCES, COLLECTOR, DRILL_RUNNER, type Flow, INTERNET, tcp } from "./network-endpoints.js";

const API_SERVER =
  "its Kubernetes API egress names no address (the API server's differs per cluster): narrow `to:` to the " +
  "API server's ipBlock (`kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes`)";

/** The orchestrator's optional HTTPS egress, each to an end only the user knows. */
const ORCHESTRATOR_HTTPS = [
  { when: "llm-egress", why: "the `openai` policy's endpoint is yours to name: narrow `to:` to its ipBlock" },
  {
    when: "oidc-egress",
    why: "the OpenID Connect issuer is yours to name: narrow `to:` to its host's ipBlock and its jwks_uri host's",
  },
] as const;

/** The connections to the internet the shipped policies allow, and why they name no address. */
export function wideFlows(services: readonly ServiceSpec[]): Flow[] {
  const orchestrators = services.filter((s) => s.kind === "orchestrator");
  return [
    {
      from: COLLECTOR,
      to: INTERNET,
      ports: tcp(443, 6443),
      why: `${API_SERVER}, and the tracing backend's HTTPS names none either (its ipBlock too)`,
    },
    { from: DRILL_RUNNER, to: INTERNET, ports: tcp(443, 6443), why: API_SERVER, when: "chaos-drills" },
    { from: CNPG_INSTANCES, to: INTERNET, ports: tcp(443, 6443), why: API_SERVER, when: "cloudnative-pg" },
    ...orchestrators.flatMap((o) =>
      ORCHESTRATOR_HTTPS.map(({ when, why }) => ({
        from: { workload: o.name },
        to: INTERNET,
        ports: tcp(443),
        why,
        when,
      })),
    ),
  ];
}
