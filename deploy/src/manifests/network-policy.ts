// NetworkPolicy (networking.k8s.io/v1) semantics over rendered objects, so the flow tests can ask
// "would this connection get through?" without a cluster. Written by hand: no kept npm package
// evaluates policies (CNI plugins do it in their data plane). What it implements, from the API
// reference: a pod is isolated for a direction once a policy of its namespace selects it with that
// policy type (policyTypes defaults to Ingress, plus Egress when egress rules are given); an isolated
// pod's connection is allowed when any rule of those policies matches the peer and the port; both
// ends must allow it. Peers: podSelector alone means the policy's namespace, namespaceSelector
// alone every pod of the selected namespaces, both together their intersection; an ipBlock matches
// addresses outside the pod network only (what it does to pod addresses is left to the CNI, so no
// flow between pods may rely on it). Ports: protocol defaults to TCP, a missing port means every
// port, endPort makes a range, a named port is looked up in the destination pod's containers.
import { createRequire } from "node:module";
import type { LabelSelector } from "kubernetes-types/meta/v1.js";
import type { NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort } from "kubernetes-types/networking/v1.js";

// ipaddr.js is CommonJS with no default export in its types, and Node sees no named exports in it.
const ipaddr = createRequire(import.meta.url)("ipaddr.js") as typeof import("ipaddr.js");

export type Protocol = "TCP" | "UDP" | "SCTP";

/** A pod: its namespace (and that namespace's labels) and its own labels and named ports. */
export interface PodEndpoint {
  readonly kind: "pod";
  readonly namespace: string;
  readonly namespaceLabels: Readonly<Record<string, string>>;
  readonly labels: Readonly<Record<string, string>>;
  readonly namedPorts?: Readonly<Record<string, { readonly port: number; readonly protocol: Protocol }>>;
}

/** An address outside the pod network: a node-local cache, the API server, a managed database, the internet. */
export interface AddressEndpoint {
  readonly kind: "address";
  readonly ip: string;
}

export type Endpoint = PodEndpoint | AddressEndpoint;

export type Direction = "Ingress" | "Egress";

export interface Verdict {
  readonly allowed: boolean;
  /** False when no policy selects the pod for this direction (everything allowed), or the end is not a pod of ours. */
  readonly isolated: boolean;
  /** The policies whose rules allow it. */
  readonly by: readonly string[];
}

/** The namespace labels every cluster sets (Kubernetes ≥ 1.21), plus any the rendering gives it. */
export function namespaceLabels(
  namespace: string,
  extra: Readonly<Record<string, string>> = {},
): Record<string, string> {
  return { ...extra, "kubernetes.io/metadata.name": namespace };
}

export function selectorMatches(selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  const byLabels = Object.entries(selector.matchLabels ?? {}).every(([key, value]) => labels[key] === value);
  return (
    byLabels &&
    (selector.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
      const value = labels[key];
      if (operator === "In") return value !== undefined && values.includes(value);
      if (operator === "NotIn") return value === undefined || !values.includes(value);
      if (operator === "Exists") return value !== undefined;
      if (operator === "DoesNotExist") return value === undefined;
      throw new Error(`unknown label selector operator ${operator}`);
    })
  );
}

function inBlock(ip: string, block: NonNullable<NetworkPolicyPeer["ipBlock"]>): boolean {
  const address = ipaddr.parse(ip);
  const within = (cidr: string) => {
    const range = ipaddr.parseCIDR(cidr);
    return address.kind() === range[0].kind() && address.match(range);
  };
  return within(block.cidr) && !(block.except ?? []).some(within);
}

function peerMatches(peer: NetworkPolicyPeer, policyNamespace: string, endpoint: Endpoint): boolean {
  if (peer.ipBlock) return endpoint.kind === "address" && inBlock(endpoint.ip, peer.ipBlock);
  if (endpoint.kind !== "pod") return false;
  const namespaceOk = peer.namespaceSelector
    ? selectorMatches(peer.namespaceSelector, endpoint.namespaceLabels)
    : endpoint.namespace === policyNamespace;
  return namespaceOk && (!peer.podSelector || selectorMatches(peer.podSelector, endpoint.labels));
}

function portMatches(
  ports: readonly NetworkPolicyPort[] | undefined,
  port: number,
  protocol: Protocol,
  destination: Endpoint,
): boolean {
  if (!ports || ports.length === 0) return true;
  return ports.some((rule) => {
    if ((rule.protocol ?? "TCP") !== protocol) return false;
    if (rule.port === undefined) return true;
    if (typeof rule.port === "string") {
      const named = destination.kind === "pod" ? destination.namedPorts?.[rule.port] : undefined;
      return named !== undefined && named.port === port && named.protocol === protocol;
    }
    return rule.endPort === undefined ? rule.port === port : port >= rule.port && port <= rule.endPort;
  });
}

function typesOf(policy: NetworkPolicy): readonly string[] {
  return policy.spec?.policyTypes ?? ["Ingress", ...(policy.spec?.egress ? ["Egress"] : [])];
}

/** Policies of the pod's namespace that select it for `direction`. */
export function selecting(policies: readonly NetworkPolicy[], pod: PodEndpoint, direction: Direction): NetworkPolicy[] {
  return policies.filter(
    (p) =>
      p.metadata?.namespace === pod.namespace &&
      typesOf(p).includes(direction) &&
      selectorMatches(p.spec?.podSelector ?? {}, pod.labels),
  );
}

/** Whether `direction` at the end the policies govern (the source for Egress, the destination for Ingress) lets the connection through. */
export function verdict(
  policies: readonly NetworkPolicy[],
  direction: Direction,
  from: Endpoint,
  to: Endpoint,
  port: number,
  protocol: Protocol,
): Verdict {
  const [own, peer] = direction === "Egress" ? [from, to] : [to, from];
  if (own.kind !== "pod") return { allowed: true, isolated: false, by: [] };
  const governing = selecting(policies, own, direction);
  if (governing.length === 0) return { allowed: true, isolated: false, by: [] };
  const by = governing
    .filter((policy) => {
      const rules = direction === "Egress" ? (policy.spec?.egress ?? []) : (policy.spec?.ingress ?? []);
      return rules.some((rule) => {
        const peers =
          direction === "Egress"
            ? (rule as { to?: NetworkPolicyPeer[] }).to
            : (rule as { from?: NetworkPolicyPeer[] }).from;
        const peerOk =
          !peers || peers.length === 0 || peers.some((p) => peerMatches(p, policy.metadata!.namespace!, peer));
        return peerOk && portMatches(rule.ports, port, protocol, to);
      });
    })
    .map((policy) => policy.metadata!.name!);
  return { allowed: by.length > 0, isolated: true, by };
}

/** Both ends: the source's egress and the destination's ingress. */
export function connection(
  policies: readonly NetworkPolicy[],
  from: Endpoint,
  to: Endpoint,
  port: number,
  protocol: Protocol,
): { egress: Verdict; ingress: Verdict } {
  return {
    egress: verdict(policies, "Egress", from, to, port, protocol),
    ingress: verdict(policies, "Ingress", from, to, port, protocol),
  };
}
