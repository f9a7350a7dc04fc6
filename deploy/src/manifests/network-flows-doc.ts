// The network flows as a table in docs/kubernetes.md, between markers `pnpm gen` rewrites.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { NAMESPACE } from "./cluster-names.js";
import type { EndpointRef, Flow } from "./network-endpoints.js";
import { deniedFlows, requiredFlows } from "./network-flows.js";
import { wideFlows } from "./network-flows-wide.js";

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
  const unless = [flow.unless ?? []].flat().map((feature) => `\`${feature}\``);
  const parts = [
    ...(flow.when ? [flow.when === "release-path" ? "with a release path" : `with \`${flow.when}\``] : []),
    ...(unless.length > 0 ? [`not with ${unless.join(" or ")}`] : []),
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
    "Allowed though the suite needs less (these policies name no address, the real end's differing per cluster;",
    "checked too, and no other connection to the internet gets through): narrow each in your overlay",
    "with a patch that sets its `to:` to an ipBlock.",
    "",
    ...table(wideFlows(services)),
    "",
    "Denied (checked too, so a policy that opens too much fails):",
    "",
    ...table(deniedFlows(services)),
    "",
    "",
  ].join("\n");
  return `${current.slice(0, start)}${section}${current.slice(end)}`;
}
