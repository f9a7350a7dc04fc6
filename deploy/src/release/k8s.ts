// A blue-green release of one tool on Kubernetes, through whichever release path is deployed:
// - argo-rollouts: the new image goes into the Deployment the Rollout takes its template from;
//   Argo starts the preview pods, runs the pre-promotion analysis, promotes (or aborts and keeps
//   the old pods active), runs the post-promotion analysis and scales the old pods down after
//   scaleDownDelaySeconds. A rollback puts the previous image back (rollbackWindow: no analysis).
// - plain-blue-green: the idle colour gets the new image and the live replica count; once every
//   new pod is Ready (the kubelet's native gRPC probe on grpc.health.v1 answered SERVING), the
//   tool's Service is switched to it, the preview Service to the old colour and the autoscaler to
//   the new Deployment; the old colour keeps running for the scale-down delay, while clients
//   resolve the name again, then is scaled to zero (preStop, then SIGTERM: calls in flight
//   finish). A rollback switches back the same way, without changing an image.
// The plan is computed from the live objects (kubectl, or a `kubectl kustomize` rendering for a
// review without a cluster) as JSON patches guarded by `test` operations, so a concurrent change
// fails the patch rather than being overwritten; `--dry-run` shows each patch and the object it
// produces, and the tests validate those objects strictly.
import { execFile } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import jsonPatch, { type Operation } from "fast-json-patch";
import type { Deployment, ReplicaSet } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Service } from "kubernetes-types/core/v1.js";
import type { K8sObject } from "../k8s-check.js";
import type { ReleasePath } from "../k8s-files.js";
import { type Colour, COLOUR_LABEL, COLOURS, colourDeploymentName, previewServiceName, SCALE_DOWN_DELAY_SECONDS } from "../k8s-release-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import type { ReleaseKind } from "./result.js";

/** The field manager the patches are recorded under, so `kubectl get --show-managed-fields` says who changed what. */
export const FIELD_MANAGER = "loopguard-release";
const READY_TIMEOUT_MS = 600_000;
/** Pre- and post-promotion analysis (4 × 30 s each), pods starting, and the scale-down delay. */
const ROLLOUT_TIMEOUT_MS = 1_200_000;
const POLL_MS = 2_000;

export interface PatchStep {
  readonly action: "patch";
  readonly description: string;
  readonly kind: string;
  readonly name: string;
  readonly patch: readonly Operation[];
  readonly command: readonly string[];
  /** The object as the patch leaves it. */
  readonly result: K8sObject;
}

export interface WaitStep {
  readonly action: "wait";
  readonly description: string;
  readonly kind: string;
  readonly name: string;
  readonly until: "ready" | "promoted" | "delay";
  readonly seconds?: number;
  /** The kubectl command that shows the same progress. */
  readonly command: readonly string[];
}

export type Step = PatchStep | WaitStep;

export interface K8sPlan {
  readonly tool: string;
  readonly kind: ReleaseKind;
  readonly path: ReleasePath;
  readonly namespace: string;
  readonly from: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly to: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly steps: readonly Step[];
}

type Objects = readonly K8sObject[];

function find<T>(objects: Objects, kind: string, name: string): (K8sObject & T) | undefined {
  return objects.find((o) => o.kind === kind && o.metadata.name === name) as (K8sObject & T) | undefined;
}

function containerIndex(deployment: Deployment, tool: string): number {
  const index = deployment.spec!.template.spec!.containers.findIndex((c) => c.name === tool);
  if (index < 0) throw new ReleaseRefused(`Deployment ${deployment.metadata!.name} has no container named ${tool}`);
  return index;
}

function imageOf(deployment: Deployment, tool: string): string {
  return deployment.spec!.template.spec!.containers[containerIndex(deployment, tool)]!.image!;
}

/** The live image's repository with another tag: registry.example.com/loopguard/billing:3f2a1bc. */
export function withTag(image: string, tag: string): string {
  const repository = image.replace(/@sha256:[0-9a-f]+$/, "").replace(/:[^:/]+$/, "");
  return `${repository}:${tag}`;
}

/** Which release path serves the tool; refuses a tool deployed without one. */
export function releasePathOf(objects: Objects, tool: string): ReleasePath {
  if (find(objects, "Rollout", tool)) return "argo-rollouts";
  if (COLOURS.every((colour) => find(objects, "Deployment", colourDeploymentName(tool, colour)))) return "plain-blue-green";
  throw new ReleaseRefused(
    `${tool} is deployed without a release path: add deploy/k8s/components/argo-rollouts (clusters with Argo Rollouts) or deploy/k8s/components/plain-blue-green to the overlay`,
  );
}

class PlanBuilder {
  readonly steps: Step[] = [];
  readonly #objects = new Map<string, K8sObject>();

  constructor(
    readonly namespace: string,
    objects: Objects,
  ) {
    for (const object of objects) this.#objects.set(`${object.kind}/${object.metadata.name}`, structuredClone(object));
  }

  patch(kind: string, name: string, description: string, patch: Operation[]): void {
    const current = this.#objects.get(`${kind}/${name}`);
    if (!current) throw new ReleaseRefused(`${kind} ${name} is not there`);
    let result: K8sObject;
    try {
      result = jsonPatch.applyPatch(structuredClone(current), patch, true, false).newDocument;
    } catch (error) {
      // A `test` failed: the live object is not in the state the release expects.
      throw new ReleaseRefused(`${kind} ${name} is not as expected (${(error as Error).message.split("\n")[0]}): another release or a hand edit may be under way`);
    }
    this.#objects.set(`${kind}/${name}`, result);
    const command = ["kubectl", "-n", this.namespace, "patch", kind.toLowerCase(), name, "--type", "json", "--field-manager", FIELD_MANAGER, "-p", JSON.stringify(patch)];
    this.steps.push({ action: "patch", description, kind, name, patch, command, result });
  }

  wait(kind: string, name: string, description: string, until: WaitStep["until"], command: string[], seconds?: number): void {
    this.steps.push({ action: "wait", description, kind, name, until, command, ...(seconds === undefined ? {} : { seconds }) });
  }
}

function planPlain(builder: PlanBuilder, objects: Objects, spec: ServiceSpec, kind: ReleaseKind, tag: string | undefined): Omit<K8sPlan, "steps" | "namespace"> {
  const tool = spec.name;
  const service = find<Service>(objects, "Service", tool);
  const activeColour = service?.spec?.selector?.[COLOUR_LABEL] as Colour | undefined;
  if (!service || !activeColour || !COLOURS.includes(activeColour)) throw new ReleaseRefused(`Service ${tool} selects no colour (${COLOUR_LABEL}: blue|green)`);
  const idleColour = COLOURS.find((c) => c !== activeColour)!;
  const active = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, activeColour))!;
  const idle = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, idleColour))!;
  const liveImage = imageOf(active, tool);
  const idleImage = imageOf(idle, tool);
  const image = kind === "release" ? withTag(liveImage, tag!) : idleImage;
  if (kind === "release" && image === liveImage) throw new ReleaseRefused(`${tool} already runs ${liveImage}`);
  if (kind === "rollback" && idleImage === liveImage) throw new ReleaseRefused(`nothing to roll back to: ${idle.metadata!.name} runs the live image ${liveImage}`);
  const hpa = find<HorizontalPodAutoscaler>(objects, "HorizontalPodAutoscaler", tool);
  const replicas = active.spec?.replicas ?? hpa?.spec?.minReplicas ?? 1;
  const containerPath = `/spec/template/spec/containers/${containerIndex(idle, tool)}/image`;
  const [activeName, idleName] = [active.metadata!.name!, idle.metadata!.name!];

  builder.patch("Deployment", idleName, `${idleName}: ${kind === "release" ? `image ${image}, ` : ""}${replicas} replica(s), as many as ${activeName} runs`, [
    { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: idleColour },
    { op: "test", path: containerPath, value: idleImage },
    ...(image === idleImage ? [] : [{ op: "replace" as const, path: containerPath, value: image }]),
    { op: "add", path: "/spec/replicas", value: replicas },
  ]);
  builder.wait("Deployment", idleName, `every ${idleName} pod Ready: its gRPC readiness probe (grpc.health.v1) answers SERVING`, "ready", [
    "kubectl",
    "-n",
    builder.namespace,
    "rollout",
    "status",
    `deployment/${idleName}`,
  ]);
  builder.patch("Service", tool, `flip: ${tool} selects the ${idleColour} pods`, [
    { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
    { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: idleColour },
  ]);
  if (find(objects, "Service", previewServiceName(tool))) {
    builder.patch("Service", previewServiceName(tool), `${previewServiceName(tool)} selects the ${activeColour} pods, for a check before scale-down`, [
      { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: idleColour },
      { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
    ]);
  }
  if (hpa) {
    builder.patch("HorizontalPodAutoscaler", tool, `the autoscaler scales ${idleName}`, [
      { op: "test", path: "/spec/scaleTargetRef/name", value: activeName },
      { op: "replace", path: "/spec/scaleTargetRef/name", value: idleName },
    ]);
  }
  builder.wait(
    "Deployment",
    activeName,
    `${activeName} stays up ${SCALE_DOWN_DELAY_SECONDS} s while clients resolve ${tool} again (max connection age)`,
    "delay",
    ["sleep", String(SCALE_DOWN_DELAY_SECONDS)],
    SCALE_DOWN_DELAY_SECONDS,
  );
  builder.patch("Deployment", activeName, `scale ${activeName} to zero: preStop, then SIGTERM drains calls in flight (\`pnpm release ${tool} --k8s --rollback\` scales it up again)`, [
    { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: activeColour },
    { op: "add", path: "/spec/replicas", value: 0 },
  ]);
  return {
    tool,
    kind,
    path: "plain-blue-green",
    from: { colour: activeColour, image: liveImage, objects: [`deployment/${activeName}`] },
    to: { colour: idleColour, image, objects: [`deployment/${idleName}`] },
  };
}

function revisionOf(set: ReplicaSet): number {
  return Number(set.metadata?.annotations?.["rollout.argoproj.io/revision"] ?? 0);
}

function planArgo(builder: PlanBuilder, objects: Objects, spec: ServiceSpec, kind: ReleaseKind, tag: string | undefined): Omit<K8sPlan, "steps" | "namespace"> {
  const tool = spec.name;
  const rollout = find<IRollout>(objects, "Rollout", tool)!;
  const templateName = rollout.spec.workloadRef?.name;
  const template = templateName ? find<Deployment>(objects, "Deployment", templateName) : undefined;
  if (!template) throw new ReleaseRefused(`Rollout ${tool} takes no template from a Deployment (workloadRef), as components/argo-rollouts makes it`);
  const replicaSets = (objects.filter((o) => o.kind === "ReplicaSet") as ReplicaSet[]).filter((set) => set.metadata?.ownerReferences?.some((r) => r.kind === "Rollout" && r.name === tool));
  const imageOfSet = (set: ReplicaSet) => set.spec!.template!.spec!.containers.find((c) => c.name === tool)?.image;
  const stable = replicaSets.find((set) => set.metadata!.labels?.["rollouts-pod-template-hash"] === rollout.status?.stableRS);
  const current = imageOf(template, tool);
  const liveImage = (stable && imageOfSet(stable)) ?? current;
  let image: string;
  if (kind === "release") {
    image = withTag(liveImage, tag!);
    if (image === liveImage) throw new ReleaseRefused(`${tool} already runs ${liveImage}`);
  } else if (current !== liveImage) {
    // A release under way (or aborted by its analysis): back to the stable pods.
    image = liveImage;
  } else {
    const previous = replicaSets.filter((set) => revisionOf(set) < (stable ? revisionOf(stable) : Infinity)).sort((a, b) => revisionOf(b) - revisionOf(a))[0];
    const previousImage = previous && imageOfSet(previous);
    if (!previousImage || previousImage === liveImage) throw new ReleaseRefused(`nothing to roll back to: Rollout ${tool} has no earlier revision with another image`);
    image = previousImage;
  }
  const containerPath = `/spec/template/spec/containers/${containerIndex(template, tool)}/image`;
  builder.patch("Deployment", template.metadata!.name!, `${kind === "release" ? "release" : "roll back"} ${tool} to ${image} (Rollout ${tool} takes its template from here)`, [
    { op: "test", path: containerPath, value: current },
    { op: "replace", path: containerPath, value: image },
  ]);
  builder.wait(
    "Rollout",
    tool,
    kind === "release"
      ? `preview pods Ready, pre-promotion analysis (${tool}-slo), promotion, post-promotion analysis; an analysis failure aborts and keeps the old pods active`
      : "the previous pods active again (rollbackWindow: no analysis while they are still up)",
    "promoted",
    ["kubectl", "argo", "rollouts", "-n", builder.namespace, "status", tool],
  );
  return {
    tool,
    kind,
    path: "argo-rollouts",
    from: { image: liveImage, objects: [`rollout/${tool}`] },
    to: { image, objects: [`rollout/${tool}`] },
  };
}

/** The release's steps against the live objects of the tool (its Deployments, Services, HPA, Rollout and ReplicaSets). */
export function planK8sRelease(options: { readonly objects: Objects; readonly spec: ServiceSpec; readonly namespace: string; readonly kind: ReleaseKind; readonly tag?: string }): K8sPlan {
  const { objects, spec, namespace, kind, tag } = options;
  if (spec.kind !== "tool") throw new ReleaseRefused(`${spec.name} is not a tool: blue-green releases are per tool`);
  if (kind === "release" && !tag) throw new ReleaseRefused("a release needs --to <image tag>");
  const builder = new PlanBuilder(namespace, objects);
  const plan = releasePathOf(objects, spec.name) === "argo-rollouts" ? planArgo(builder, objects, spec, kind, tag) : planPlain(builder, objects, spec, kind, tag);
  return { ...plan, namespace, steps: builder.steps };
}

/** Runs kubectl; rejects with its stderr in one line. */
export function kubectl(args: readonly string[], timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile("kubectl", args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (!error) return resolve(stdout);
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return reject(new ReleaseRefused("kubectl is not installed (it talks to the cluster)"));
      reject(new ReleaseRefused(`kubectl ${args.slice(0, 4).join(" ")}: ${(stderr || error.message).trim().replaceAll("\n", " | ")}`));
    });
  });
}

/** The tool's objects in the cluster: Deployments, Services, HPA, ReplicaSets, and its Rollout where Argo Rollouts is installed. */
export async function liveObjects(namespace: string, tool: string): Promise<K8sObject[]> {
  const selector = `app.kubernetes.io/name=${tool}`;
  const list = async (kinds: string) => (JSON.parse(await kubectl(["-n", namespace, "get", kinds, "-l", selector, "-o", "json"])) as { items: K8sObject[] }).items;
  const core = await list("deployments.apps,services,horizontalpodautoscalers.autoscaling,replicasets.apps");
  const rollouts = await list("rollouts.argoproj.io").catch((error: unknown) => {
    if (/the server doesn't have a resource type/.test((error as Error).message)) return [];
    throw error;
  });
  return [...core, ...rollouts];
}

function deploymentReady(deployment: Deployment): boolean {
  const want = deployment.spec?.replicas ?? 1;
  const status = deployment.status ?? {};
  return (status.observedGeneration ?? 0) >= (deployment.metadata?.generation ?? 0) && status.updatedReplicas === want && status.readyReplicas === want && status.availableReplicas === want;
}

type RolloutState = "promoted" | "aborted" | "progressing";

function rolloutState(rollout: IRollout): { state: RolloutState; message: string } {
  const status = rollout.status ?? {};
  const message = status.message ?? status.phase ?? "";
  if (status.abort || status.phase === "Degraded") return { state: "aborted", message };
  const settled = status.currentPodHash !== undefined && status.currentPodHash === status.stableRS && status.blueGreen?.activeSelector === status.currentPodHash;
  return { state: settled && status.phase === "Healthy" ? "promoted" : "progressing", message };
}

export interface StepTimes {
  /** ISO time each step ended, in the plan's order. */
  readonly ended: string[];
  /** When the tool's Service (or Argo's active Service) started selecting the new pods. */
  flippedAt?: string;
}

/** Applies a plan step by step; a wait that times out or an aborted rollout stops it with ReleaseRefused. */
export async function applyK8sPlan(plan: K8sPlan, log: (line: string) => void): Promise<StepTimes> {
  const times: StepTimes = { ended: [] };
  for (const step of plan.steps) {
    log(step.description);
    if (step.action === "patch") {
      await kubectl(step.command.slice(1));
      if (step.kind === "Service" && step.name === plan.tool) times.flippedAt = new Date().toISOString();
    } else if (step.until === "delay") {
      await sleep(step.seconds! * 1000);
    } else {
      const deadline = Date.now() + (step.until === "ready" ? READY_TIMEOUT_MS : ROLLOUT_TIMEOUT_MS);
      for (;;) {
        const object = JSON.parse(await kubectl(["-n", plan.namespace, "get", step.kind === "Rollout" ? "rollouts.argoproj.io" : "deployments.apps", step.name, "-o", "json"]));
        if (step.until === "ready" && deploymentReady(object as Deployment)) break;
        if (step.until === "promoted") {
          const { state, message } = rolloutState(object as IRollout);
          const active = (object as IRollout).status?.blueGreen?.activeSelector;
          if (!times.flippedAt && active && active === (object as IRollout).status?.currentPodHash) times.flippedAt = new Date().toISOString();
          if (state === "promoted") break;
          if (state === "aborted") throw new ReleaseRefused(`Rollout ${step.name} aborted: the old pods stay active (${message})`);
        }
        if (Date.now() > deadline) throw new ReleaseRefused(`${step.kind} ${step.name} did not get there in time: \`${step.command.join(" ")}\` shows why`);
        await sleep(POLL_MS);
      }
    }
    times.ended.push(new Date().toISOString());
  }
  return times;
}
