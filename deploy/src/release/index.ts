// Blue-green releases per tool, for programs (the drill runner) and for `pnpm release`:
//   release({ tool: "billing", to: "3f2a1bc" })              the local containers (`pnpm containers`)
//   release({ tool: "billing", to: "3f2a1bc", k8s: true })   the cluster, through its release path
//   rollback({ tool: "billing" })                             back to the set that was live before
// Each resolves with what happened and when ({ from, to, flippedAt, timings, … }) and rejects
// with ReleaseRefused (one-line message, `detail` holding e.g. buf's findings) when it must not or
// could not go ahead. A release first runs the contract gate: `buf breaking` of the new image's
// contracts against the live image's.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import { type K8sObject, kustomize } from "../manifests/renderings.js";
import { NAMESPACE } from "../manifests/cluster-names.js";
import { checkContracts, ReleaseRefused, toolContractPaths } from "./contract-gate.js";
import { type K8sPlan, planK8sRelease } from "./k8s.js";
import { applyK8sPlan, liveObjects } from "./k8s-apply.js";
import { releaseGateOf } from "./gate.js";
import { prometheusProxyPath } from "./k8s-gate.js";
import { afterPlan, checkOverlay, recordState } from "./k8s-state.js";
import { releaseLocal } from "./local.js";
import { migrationGate } from "./migration-gate.js";
import { between, type ReleaseKind, type ReleaseResult } from "./result.js";

export { ReleaseRefused } from "./contract-gate.js";
export type { K8sPlan, Step } from "./k8s.js";
export type { ReleasedSet, ReleaseKind, ReleaseResult, ReleaseTarget, ReleaseTimings } from "./result.js";

const defaultRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export interface ReleaseOptions {
  readonly tool: string;
  /** Through the Kubernetes API (kubectl) instead of the local containers. */
  readonly k8s?: boolean;
  /** Kubernetes namespace (default loopguard). */
  readonly namespace?: string;
  /** Check and plan, change nothing; on Kubernetes the result holds every patch and the object it makes. */
  readonly dryRun?: boolean;
  /** Kubernetes: plan against this kustomization's rendering (what `kubectl apply -k` of it would hold) instead of the cluster. */
  readonly fromManifests?: string;
  /** The repository (default: the one this code is built in). */
  readonly root?: string;
  /** The local suite's data folder (default LOOPGUARD_DATA_DIR, else <root>/.data). */
  readonly dataDir?: string;
  /**
   * Kubernetes: the kustomization the cluster is applied from; the release records what it leaves
   * in its release-state Component (k8s-state.ts), so a re-apply keeps it. `pnpm release` requires it.
   */
  readonly overlay?: string;
  /** Kubernetes, plain path: Prometheus's in-cluster URL, asked by the release gate through the API server (default prometheus-operator's). */
  readonly prometheus?: string;
  /** Progress, one line at a time. */
  readonly log?: (line: string) => void;
}

export type K8sReleaseResult = ReleaseResult & {
  readonly plan: K8sPlan;
  /** The state file the release wrote into the overlay, to commit. */
  readonly recorded?: string;
};

function servicesOf(root: string): ServiceSpec[] {
  return discoverServices(join(root, "services"));
}

function specOf(services: readonly ServiceSpec[], tool: string): ServiceSpec {
  const spec = services.find((s) => s.name === tool);
  if (!spec)
    throw new ReleaseRefused(
      `unknown tool "${tool}" (tools: ${services
        .filter((s) => s.kind === "tool")
        .map((s) => s.name)
        .join(", ")})`,
    );
  return spec;
}

async function toolObjects(options: ReleaseOptions, namespace: string): Promise<K8sObject[]> {
  if (!options.fromManifests) return liveObjects(namespace, options.tool);
  const rendering = kustomize(resolve(options.fromManifests), options.fromManifests);
  return rendering.objects.filter(
    (o) =>
      (o.metadata.namespace ?? namespace) === namespace &&
      o.metadata.labels?.["app.kubernetes.io/name"] === options.tool,
  );
}

async function onKubernetes(
  options: ReleaseOptions,
  kind: ReleaseKind,
  tag: string | undefined,
): Promise<K8sReleaseResult> {
  const root = options.root ?? defaultRoot;
  const log = options.log ?? (() => undefined);
  const namespace = options.namespace ?? NAMESPACE;
  const services = servicesOf(root);
  const spec = specOf(services, options.tool);
  if (options.prometheus) prometheusProxyPath(options.prometheus);
  const startedAt = new Date().toISOString();
  const objects = await toolObjects(options, namespace);
  const plan = planK8sRelease({
    objects,
    spec,
    namespace,
    kind,
    ...(tag ? { tag, gate: releaseGateOf(root, services, spec.name) } : {}),
  });
  const overlay = options.overlay && !options.dryRun ? resolve(options.overlay) : undefined;
  if (overlay) checkOverlay(overlay, options.overlay!, objects, spec.name);
  if (kind === "release") {
    const paths = toolContractPaths(spec.name);
    log(`contract gate: buf breaking of ${plan.to.image} against the live ${plan.from.image} (${paths.join(", ")})`);
    await checkContracts({ root, tool: spec.name, live: plan.from.image, candidate: plan.to.image, paths, pull: true });
    log("contract gate: compatible");
    if (spec.stateful)
      await migrationGate(log, {
        live: plan.from.image,
        candidate: plan.to.image,
        pull: true,
        ...(plan.from.colour ? { colour: plan.from.colour } : {}),
      });
  }
  const sets = { from: { ...plan.from, pods: plan.from.objects }, to: { ...plan.to, pods: plan.to.objects } };
  if (options.dryRun)
    return {
      tool: spec.name,
      kind,
      target: plan.path,
      dryRun: true,
      ...sets,
      startedAt,
      timings: { totalMs: 0 },
      plan,
    };

  const times = await applyK8sPlan(plan, log, options.prometheus ? { prometheus: options.prometheus } : {});
  const recorded = overlay ? recordState(overlay, options.overlay!, afterPlan(objects, plan), spec.name) : undefined;
  if (recorded)
    log(`recorded in ${recorded}: commit it, so \`kubectl apply -k ${options.overlay}\` keeps this release`);
  const endOf = (until: string) => times.ended[plan.steps.findIndex((s) => s.action === "wait" && s.until === until)];
  const servingAt = endOf("ready");
  const clientsMovedAt = endOf("delay");
  const drainedAt = plan.path === "plain-blue-green" ? times.ended.at(-1) : undefined;
  const endedAt = times.ended.at(-1)!;
  return {
    tool: spec.name,
    kind,
    target: plan.path,
    dryRun: false,
    ...sets,
    startedAt,
    ...(servingAt ? { servingAt } : {}),
    ...(times.flippedAt ? { flippedAt: times.flippedAt } : {}),
    ...(clientsMovedAt ? { clientsMovedAt } : {}),
    ...(drainedAt ? { drainedAt } : {}),
    timings: {
      startMs: between(startedAt, servingAt),
      flipMs: between(servingAt, times.flippedAt),
      clientsMovedMs: between(times.flippedAt, clientsMovedAt),
      drainMs: between(clientsMovedAt, drainedAt),
      totalMs: between(startedAt, endedAt)!,
    },
    ...(times.gates["before the flip"]
      ? {
          gate: {
            beforeFlip: times.gates["before the flip"],
            ...(times.gates["after the flip"] ? { afterFlip: times.gates["after the flip"] } : {}),
          },
        }
      : {}),
    plan,
    ...(recorded ? { recorded } : {}),
  };
}

function locally(options: ReleaseOptions, rollback: boolean, to: string | undefined): Promise<ReleaseResult> {
  const root = options.root ?? defaultRoot;
  return releaseLocal({
    root,
    dataDir: resolve(options.dataDir ?? (process.env.LOOPGUARD_DATA_DIR || join(root, ".data"))),
    services: servicesOf(root),
    tool: options.tool,
    ...(to ? { to } : {}),
    rollback,
    dryRun: options.dryRun ?? false,
    log: options.log ?? (() => undefined),
  });
}

/** Releases image tag `to` of a tool blue-green, after the contract gate. */
export function release(options: ReleaseOptions & { readonly to: string }): Promise<ReleaseResult | K8sReleaseResult> {
  return options.k8s ? onKubernetes(options, "release", options.to) : locally(options, false, options.to);
}

/** Switches a tool back to the set that was live before its last release. */
export function rollback(options: ReleaseOptions): Promise<ReleaseResult | K8sReleaseResult> {
  return options.k8s ? onKubernetes(options, "rollback", undefined) : locally(options, true, undefined);
}
