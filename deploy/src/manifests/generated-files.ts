// Everything `pnpm gen` writes besides the contracts' code (the orchestrator's local tool
// addresses and the network flows table of docs/kubernetes.md too), rendered from one reading of
// the services' manifests and one set of SLO rules, so the rule files and the PrometheusRule agree.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { DescFile } from "@bufbuild/protobuf";
import { servicePolicy } from "@loopguard/tool-sdk";
import {
  BASE_SERVICES_DIR,
  COMPONENTS_DIR,
  GENERATED_COMPONENTS,
  renderK8sFiles,
  renderPatrolFiles,
} from "./generated-components.js";
import { overlayNamesFiles } from "./namespace-replacements.js";
import { GOLDEN_SET_FILE } from "./patrol-objects.js";
import { LOCAL_ADDRESSES_FILE, renderLocalToolAddresses } from "../local/tool-addresses.js";
import { FLOWS_DOC, renderFlowsDoc } from "./network-flows-doc.js";
import {
  alertRules,
  deployedServices,
  GENERATED_HEADER,
  readServices,
  renderPrometheusFiles,
  RULES_DIR,
  serviceSlos,
  SLO_ALERT_TESTS_DIR,
} from "./prometheus-files.js";
import { sloAlertCases } from "./slo-alert-cases.js";
import { toYaml } from "./yaml.js";

export interface GeneratedFiles {
  /** Path relative to the repository root → content. */
  readonly files: Map<string, string>;
  /** Folders holding only generated files: anything else found there is left over. */
  readonly ownedDirs: readonly string[];
}

export function renderGeneratedFiles(repoRoot: string, contracts: readonly DescFile[]): GeneratedFiles {
  const services = readServices(repoRoot);
  const rules = alertRules(repoRoot, contracts, services);
  const methods = serviceSlos(repoRoot, contracts, services);
  const tools = deployedServices(contracts, services).map((s) => servicePolicy(s).toolName);
  const k8s = new Map([
    ...renderK8sFiles(services, { rules, methods }),
    ...renderPatrolFiles(services, readFileSync(join(repoRoot, GOLDEN_SET_FILE), "utf8")),
  ]);
  const names = [...overlayNamesFiles(repoRoot, k8s)].map(([path, replacements]): [string, string] => [
    path,
    toYaml(replacements, GENERATED_HEADER),
  ]);
  return {
    files: new Map([
      ...renderPrometheusFiles(services, rules, sloAlertCases(rules, methods, tools)),
      ...k8s,
      ...names,
      ...renderLocalToolAddresses(services),
      [FLOWS_DOC, renderFlowsDoc(readFileSync(join(repoRoot, FLOWS_DOC), "utf8"), services)],
    ]),
    ownedDirs: [
      RULES_DIR,
      SLO_ALERT_TESTS_DIR,
      BASE_SERVICES_DIR,
      dirname(LOCAL_ADDRESSES_FILE),
      ...GENERATED_COMPONENTS.map((name) => join(COMPONENTS_DIR, name)),
    ],
  };
}
