// The steps of a Kubernetes release plan (k8s.ts) and the builder that makes them: each patch is a
// JSON patch computed against the objects as the steps before it leave them, with the object it
// produces; a gate step carries its smoke Job, its queries and the steps that undo the release.
// Also what both paths read off the live objects (an object by kind and name, a container's image).
import type { ServiceSpec } from "@loopguard/tool-sdk";
import jsonPatch, { type Operation } from "fast-json-patch";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { K8sObject } from "../../manifests/renderings.js";
import type { ReleasePath } from "../../manifests/generated-components.js";
import { migrateJob, migrateJobLabels, migrateJobName } from "../../manifests/migration-objects.js";
import { serviceHost } from "../../manifests/cluster-names.js";
import { type Colour, COLOUR_LABEL, RELEASE_SERIES_LABEL } from "../../manifests/release-objects.js";
import { SMOKE_LABEL, smokeJobSpec } from "../../manifests/smoke-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import { type JudgedMethod, judgedMethods, type ReleaseGate } from "./gate.js";
import { type GateQuery, gateQueries } from "../../manifests/gate-queries.js";
import type { ReleaseKind } from "./result.js";

/**
 * The field manager of every change a release makes (patches, smoke Jobs), so `kubectl get
 * --show-managed-fields` says who changed what; the README applies the overlay as `loopguard`.
 */
export const FIELD_MANAGER = "loopguard-release";

export interface PatchStep {
  readonly action: "patch";
  readonly description: string;
  readonly kind: string;
  readonly name: string;
  readonly patch: readonly Operation[];
  readonly command: readonly string[];
  /** The object as the patch leaves it. */
  readonly result: K8sObject;
  /** After the flip of a gated release: what undoes the release when this patch fails, and what that leaves. */
  readonly onFailure?: readonly Step[];
  readonly undone?: string;
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
  /**
   * What undoes the release when the wait fails (Argo: the Rollout aborted or paused on an
   * inconclusive analysis, or it cannot be followed; plain path: a wait after the flip of a gated
   * release), and what that leaves, in words.
   */
  readonly onFailure?: readonly Step[];
  readonly undone?: string;
}

/** The release gate on the plain path: smoke calls from a Job, then the gate queries on this release's pods. */
export interface GateStep {
  readonly action: "gate";
  readonly description: string;
  readonly kind: "Job";
  /** The smoke Job's name. */
  readonly name: string;
  readonly when: "before the flip" | "after the flip";
  /** The smoke Job (batch/v1), created as it is. */
  readonly job: K8sObject;
  readonly queries: readonly GateQuery[];
  /** The SLOs the answers are judged against. */
  readonly methods: readonly JudgedMethod[];
  readonly command: readonly string[];
  /** What undoes the release when the gate fails, and what that leaves, in words. */
  readonly onFailure: readonly Step[];
  readonly undone: string;
}

/** The new image's migration step: a Job running `migrate`, before any of its pods start (they wait for the schema in their init container). */
export interface MigrateStep {
  readonly action: "migrate";
  readonly description: string;
  readonly kind: "Job";
  readonly name: string;
  /** The Job (batch/v1), created as it is. */
  readonly job: K8sObject;
  readonly command: readonly string[];
}

export type Step = PatchStep | WaitStep | GateStep | MigrateStep;

export interface K8sPlan {
  readonly tool: string;
  readonly kind: ReleaseKind;
  readonly path: ReleasePath;
  readonly namespace: string;
  readonly from: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly to: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly steps: readonly Step[];
}

export type Objects = readonly K8sObject[];

export function find<T>(objects: Objects, kind: string, name: string): (K8sObject & T) | undefined {
  return objects.find((o) => o.kind === kind && o.metadata.name === name) as (K8sObject & T) | undefined;
}

export function containerIndex(deployment: Deployment, tool: string): number {
  const index = deployment.spec!.template.spec!.containers.findIndex((c) => c.name === tool);
  if (index < 0) throw new ReleaseRefused(`Deployment ${deployment.metadata!.name} has no container named ${tool}`);
  return index;
}

export function imageOf(deployment: Deployment, tool: string): string {
  return deployment.spec!.template.spec!.containers[containerIndex(deployment, tool)]!.image!;
}

/** The live image's repository with another tag: registry.example.com/loopguard/billing:3f2a1bc. */
export function withTag(image: string, tag: string): string {
  const repository = image.replace(/@sha256:[0-9a-f]+$/, "").replace(/:[^:/]+$/, "");
  return `${repository}:${tag}`;
}

/** What undoes the release from where the steps so far leave the objects, and what that leaves, in words. */
export interface Undo {
  readonly plan: (from: PlanBuilder) => void;
  readonly undone: string;
}

export class PlanBuilder {
  readonly steps: Step[] = [];
  readonly #objects = new Map<string, K8sObject>();
  #undo: Undo | undefined;

  constructor(
    readonly namespace: string,
    objects: readonly K8sObject[],
  ) {
    for (const object of objects) this.#objects.set(`${object.kind}/${object.metadata.name}`, structuredClone(object));
  }

  /** The objects as the steps so far leave them. */
  current(): K8sObject[] {
    return [...this.#objects.values()].map((o) => structuredClone(o));
  }

  /** A builder of steps that start from where these leave the objects (what undoes them). */
  fork(): PlanBuilder {
    return new PlanBuilder(this.namespace, this.current());
  }

  /**
   * From here on every step carries `undo`, planned from the objects as the steps before it leave
   * them (a step that fails changed nothing), so any failure of the step undoes the release.
   */
  undoFromHere(undo: Undo | undefined): void {
    this.#undo = undo;
  }

  /** `undo`'s steps, planned from the objects as the steps so far leave them. */
  #planned(undo: Undo): { onFailure: readonly Step[]; undone: string } {
    const from = this.fork();
    undo.plan(from);
    return { onFailure: from.steps, undone: undo.undone };
  }

  #undoNow(): { onFailure?: readonly Step[]; undone?: string } {
    return this.#undo ? this.#planned(this.#undo) : {};
  }

  patch(kind: string, name: string, description: string, patch: Operation[]): void {
    const undo = this.#undoNow();
    const current = this.#objects.get(`${kind}/${name}`);
    if (!current) throw new ReleaseRefused(`${kind} ${name} is not there`);
    let result: K8sObject;
    try {
      result = jsonPatch.applyPatch(structuredClone(current), patch, true, false).newDocument;
    } catch (error) {
      // A `test` failed: the live object is not in the state the release expects.
      throw new ReleaseRefused(
        `${kind} ${name} is not as expected (${(error as Error).message.split("\n")[0]}): another release or a hand edit may be under way`,
      );
    }
    this.#objects.set(`${kind}/${name}`, result);
    const command = [
      "kubectl",
      "-n",
      this.namespace,
      "patch",
      kind.toLowerCase(),
      name,
      "--type",
      "json",
      "--field-manager",
      FIELD_MANAGER,
      "-p",
      JSON.stringify(patch),
    ];
    this.steps.push({ action: "patch", description, kind, name, patch, command, result, ...undo });
  }

  wait(
    kind: string,
    name: string,
    description: string,
    until: WaitStep["until"],
    command: string[],
    seconds?: number,
    undo?: Undo,
  ): void {
    this.steps.push({
      action: "wait",
      description,
      kind,
      name,
      until,
      command,
      ...(seconds === undefined ? {} : { seconds }),
      ...(undo ? this.#planned(undo) : this.#undoNow()),
    });
  }

  /** `migrate` from `image` in a Job of its own, named for this release, as the plan's first step. */
  migrateFirst(spec: ServiceSpec, image: string): void {
    const name = `${migrateJobName(spec)}-${Date.now().toString(36)}`;
    const job = {
      ...migrateJob(spec, name, image),
      metadata: { name, namespace: this.namespace, labels: migrateJobLabels(spec) },
    } as K8sObject;
    this.steps.unshift({
      action: "migrate",
      description: `migration step: Job ${name} runs \`migrate\` from ${image}; its pods wait for the schema it makes (wait-for-schema), the live pods keep serving`,
      kind: "Job",
      name,
      job,
      command: ["kubectl", "-n", this.namespace, "create", "-f", "-"],
    });
  }

  /**
   * A smoke Job from `image` through Service `through`, then the gate queries on the pods of
   * `pods.colour` that this release started (labelled `pods.release`), not those the colour ran before.
   */
  gate(
    spec: ServiceSpec,
    gate: ReleaseGate,
    when: GateStep["when"],
    through: string,
    pods: { readonly colour: Colour; readonly release: string },
    image: string,
    undo: Undo,
  ): void {
    const name = `${spec.name}-smoke-${when === "before the flip" ? "preview" : "live"}-${Date.now().toString(36)}`;
    const job = {
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: {
        name,
        namespace: this.namespace,
        labels: {
          "app.kubernetes.io/name": spec.name,
          "app.kubernetes.io/part-of": "loopguard",
          [SMOKE_LABEL]: spec.name,
        },
      },
      // Kept an hour for `kubectl logs`, then the cluster removes it.
      spec: {
        ...smokeJobSpec(spec, gate.call, `${serviceHost(through)}:${spec.port}`, image),
        ttlSecondsAfterFinished: 3600,
      },
    };
    this.steps.push({
      action: "gate",
      description: `release gate ${when}: smoke calls from Job ${name} through ${through}, then the SLO queries on this release's ${pods.colour} pods (${RELEASE_SERIES_LABEL}="${pods.release}")`,
      kind: "Job",
      name,
      when,
      job,
      queries: gateQueries(gate.slos, { [COLOUR_LABEL]: pods.colour, [RELEASE_SERIES_LABEL]: pods.release }),
      methods: judgedMethods(gate.slos),
      command: ["kubectl", "-n", this.namespace, "create", "--field-manager", FIELD_MANAGER, "-f", "-"],
      ...this.#planned(undo),
    });
  }
}
