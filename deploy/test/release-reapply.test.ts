// A release survives a re-apply of the overlay: a release of billing is applied through the
// recording kubectl (test/fake-kubectl.mjs, as in release-kubectl.test.ts: no cluster runs here),
// the cluster's objects are then the rendering with the release's patches, the release records its
// state in the overlay's release-state Component, and the overlay is rendered again with the real
// `kubectl kustomize`: nothing a re-apply would send differs from what the release left (Service
// and preview selectors, the autoscaler's target and bounds, each colour's count and image), and
// the active colour's count is left out, to its owner. Without the state, the same re-apply puts
// the Service back on blue, whose Deployment the release scaled to zero.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, kustomize, validateRenderings } from "../src/manifests/renderings.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { ReleaseRefused } from "../src/ops/release/contract-gate.js";
import { releaseGateOf } from "../src/ops/release/gate.js";
import { planK8sRelease } from "../src/ops/release/k8s.js";
import { applyK8sPlan } from "../src/ops/release/k8s-apply.js";
import { afterPlan, checkOverlay, RELEASE_STATE_DIR, reapplyMoves, recordState } from "../src/ops/release/k8s-state.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const services = discoverServices(join(root, "services"));
const billing = services.find((s) => s.name === "billing")!;
const scratch: string[] = [];

afterAll(() => {
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** An overlay of one's own, as the README shows: prod, a release path, and (when `keep`) the release state. */
function overlay(path: "plain-blue-green" | "argo-rollouts", keep: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-overlay-"));
  scratch.push(dir);
  const components = [relative(dir, join(root, COMPONENTS_DIR, path)), ...(keep ? [RELEASE_STATE_DIR] : [])];
  writeFileSync(
    join(dir, "kustomization.yaml"),
    `resources: [${JSON.stringify(relative(dir, join(root, OVERLAYS_DIR, "prod")))}]\ncomponents: ${JSON.stringify(components)}\n`,
  );
  return dir;
}

const ofBilling = (objects: readonly K8sObject[]) =>
  objects.filter((o) => o.metadata.labels?.["app.kubernetes.io/name"] === "billing");
const find = (objects: readonly K8sObject[], kind: string, name: string) =>
  objects.find((o) => o.kind === kind && o.metadata.name === name) as K8sObject & { spec: Record<string, never> };
const release = (live: readonly K8sObject[], kind: "release" | "rollback", tag?: string) =>
  planK8sRelease({ objects: live, spec: billing, namespace: "loopguard", kind, ...(tag ? { tag } : {}) });

/** Every field the rendering sends, with the live value where it differs: what a re-apply would change. */
function changes(rendered: unknown, live: unknown, path = ""): string[] {
  if (rendered !== null && typeof rendered === "object" && !Array.isArray(rendered)) {
    return Object.entries(rendered).flatMap(([key, value]) =>
      changes(value, (live as Record<string, unknown> | undefined)?.[key], `${path}.${key}`),
    );
  }
  return JSON.stringify(rendered) === JSON.stringify(live)
    ? []
    : [`${path}: ${JSON.stringify(live)} → ${JSON.stringify(rendered)}`];
}

function reapplied(rendered: readonly K8sObject[], live: readonly K8sObject[]): string[] {
  return ofBilling(rendered).flatMap((o) =>
    changes(o, find(live, o.kind, o.metadata.name)).map((c) => `${o.kind} ${o.metadata.name}${c}`),
  );
}

describe("plain-blue-green: a re-apply after a release", () => {
  let fake: string;
  const path = process.env.PATH;
  beforeAll(() => {
    fake = mkdtempSync(join(tmpdir(), "loopguard-fake-kubectl-"));
    scratch.push(fake);
    writeFileSync(
      join(fake, "kubectl"),
      `#!/bin/sh\nexec "${process.execPath}" "${join(here, "fake-kubectl.mjs")}" "$@"\n`,
    );
    chmodSync(join(fake, "kubectl"), 0o755);
    writeFileSync(
      join(fake, "scenario.json"),
      JSON.stringify({
        fixtures: join(here, "fixtures", "prometheus"),
        prometheus: ["good", "good"],
        jobs: ["Complete", "Complete"],
      }),
    );
  });

  it("without the release state, puts the Service back on blue at zero pods and the autoscaler on blue", () => {
    const dir = overlay("plain-blue-green", false);
    const rendered = ofBilling(kustomize(dir).objects);
    const live = afterPlan(rendered, release(rendered, "release", "v2"));
    expect(reapplyMoves(rendered, live, "billing")).toEqual([
      'Service billing spec.selector: {"app.kubernetes.io/name":"billing","version":"green"} → {"app.kubernetes.io/name":"billing","version":"blue"}',
      'Service billing-preview spec.selector: {"app.kubernetes.io/name":"billing","version":"blue"} → {"app.kubernetes.io/name":"billing","version":"green"}',
      "Deployment billing-green spec.replicas: 2 → 0",
      'Deployment billing-green images: [{"name":"billing","image":"registry.example.com/loopguard/billing:v2"}] → [{"name":"billing","image":"registry.example.com/loopguard/billing:unset"}]',
      'HorizontalPodAutoscaler billing spec.scaleTargetRef: {"apiVersion":"apps/v1","kind":"Deployment","name":"billing-green"} → {"apiVersion":"apps/v1","kind":"Deployment","name":"billing-blue"}',
    ]);
    expect(find(live, "Deployment", "billing-blue").spec.replicas).toBe(0);
  }, 60_000);

  it("refuses an overlay that does not list the release state, before any change, and writes what runs for it to list", () => {
    const dir = overlay("plain-blue-green", false);
    const live = ofBilling(kustomize(dir).objects);
    expect(() => checkOverlay(dir, "my-overlay", live, "billing")).toThrow(ReleaseRefused);
    expect(() => checkOverlay(dir, "my-overlay", live, "billing")).toThrow(
      /my-overlay\/kustomization.yaml does not list the component release-state/,
    );
    expect(readFileSync(join(dir, RELEASE_STATE_DIR, "billing.yaml"), "utf8")).toContain("version: blue");
  }, 60_000);

  it("moves nothing once the release is recorded: through the fake kubectl with both gates, then a second release and a rollback", async () => {
    // The first time: refused, with the state of what runs written; the overlay then lists it, as one would.
    const dir = overlay("plain-blue-green", false);
    expect(() => checkOverlay(dir, "mine", ofBilling(kustomize(dir).objects), "billing")).toThrow(ReleaseRefused);
    const kustomization = join(dir, "kustomization.yaml");
    writeFileSync(kustomization, readFileSync(kustomization, "utf8").replace(/\]\n$/, `,"${RELEASE_STATE_DIR}"]\n`));
    checkOverlay(dir, "mine", [], "billing");
    let live = ofBilling(kustomize(dir).objects);
    expect(reapplied(live, live)).toEqual([]);

    const plan = planK8sRelease({
      objects: live,
      spec: billing,
      namespace: "loopguard",
      kind: "release",
      tag: "v2",
      gate: releaseGateOf(root, services, "billing"),
    });
    process.env.PATH = `${fake}${delimiter}${path}`;
    process.env.FAKE_KUBECTL_DIR = fake;
    try {
      await applyK8sPlan(plan, () => undefined, { sleep: async () => undefined });
    } finally {
      process.env.PATH = path;
    }
    const patched = readFileSync(join(fake, "calls.jsonl"), "utf8")
      .split("\n")
      .filter((l) => l.includes('"patch"')).length;
    expect(patched).toBe(5);
    live = afterPlan(live, plan);
    const file = recordState(dir, "mine", live, "billing");
    expect(readFileSync(file, "utf8").split("\n").length, "a state file a reviewer reads").toBeLessThan(80);
    const rendering = kustomize(dir, "overlay with release state");
    const rendered = ofBilling(rendering.objects);
    expect(reapplied(rendered, live)).toEqual([]);
    expect(find(rendered, "Service", "billing").spec.selector).toEqual({
      "app.kubernetes.io/name": "billing",
      version: "green",
    });
    expect(find(rendered, "Deployment", "billing-green").spec.replicas, "left to the autoscaler").toBeUndefined();
    expect(find(live, "Deployment", "billing-green").spec.replicas).toBe(2);
    expect(find(rendered, "Deployment", "billing-blue").spec.replicas).toBe(0);
    expect(find(rendered, "HorizontalPodAutoscaler", "billing").spec.minReplicas).toBe(
      find(live, "HorizontalPodAutoscaler", "billing").spec.minReplicas,
    );
    expect(validateRenderings([rendering])).toEqual([]);

    for (const [kind, tag, active, image] of [
      ["release", "v3", "blue", "v3"],
      ["rollback", undefined, "green", "v2"],
    ] as const) {
      live = afterPlan(live, release(live, kind, tag));
      recordState(dir, "mine", live, "billing");
      const again = kustomize(dir).objects;
      expect(reapplied(again, live), `after the ${kind}`).toEqual([]);
      expect(find(again, "Service", "billing").spec.selector, `after the ${kind}`).toMatchObject({ version: active });
      const deployment = find(again, "Deployment", `billing-${active}`) as unknown as Deployment;
      expect(deployment.spec!.template.spec!.containers[0]!.image).toBe(
        `registry.example.com/loopguard/billing:${image}`,
      );
    }
  }, 180_000);
});

describe("argo-rollouts: a re-apply after a release", () => {
  it("keeps the released image in the Deployment the Rollout reads; replicas, ReplicaSets and the Services' pod-hash selectors are the controller's", () => {
    const dir = overlay("argo-rollouts", true);
    const bare = ofBilling(kustomize(overlay("argo-rollouts", false)).objects);
    recordState(dir, "mine", bare, "billing");
    const live = afterPlan(bare, release(bare, "release", "v2"));
    recordState(dir, "mine", live, "billing");
    const rendered = ofBilling(kustomize(dir).objects);
    expect(reapplied(rendered, live)).toEqual([]);
    expect(
      (find(rendered, "Deployment", "billing") as unknown as Deployment).spec!.template.spec!.containers[0]!.image,
    ).toBe("registry.example.com/loopguard/billing:v2");
    expect(find(rendered, "Rollout", "billing").spec.replicas).toBeUndefined();
  }, 60_000);
});

describe("pnpm release --k8s", () => {
  it("needs --overlay, where it records the release (not for a dry run)", () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, [join(root, "deploy", "dist", "ops", "release", "main.js"), ...args], {
        encoding: "utf8",
      });
    const refused = cli("billing", "--to", "v2", "--k8s");
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(
      /^release: --k8s needs --overlay DIR, where the release is recorded so a re-apply keeps it\n/,
    );
    expect(cli("billing", "--to", "v2", "--overlay", "x").stderr).toMatch(/--overlay belong to --k8s/);
  });
});
