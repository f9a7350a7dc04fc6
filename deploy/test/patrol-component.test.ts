// The patrol component as rendered into the overlays (added to each overlay's components, as a
// person adds it): a daily, bounded, dry-run CronJob of `pnpm patrol` on the overlay's orchestrator
// image, hardened and without an API token; the golden set it reads is test/golden/tasks.jsonl
// byte for byte; its network reaches the orchestrator's gRPC port and nothing else; and the
// rendered command line really starts the CLI (keys, JWKS and golden set read; the suite asked).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices, ensureLocalKeys } from "@loopguard/tool-sdk";
import type { CronJob } from "kubernetes-types/batch/v1.js";
import type { ConfigMap, Container, PodSpec } from "kubernetes-types/core/v1.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { K8sObject, Rendering } from "../src/manifests/renderings.js";
import { blocked } from "../src/manifests/network-flows-check.js";
import { deniedFlows, requiredFlows } from "../src/manifests/network-flows.js";
import {
  GOLDEN_SET_FILE,
  PATROL,
  PATROL_GOLDEN_CONFIG_MAP,
  PATROL_PEOPLE_SECRET,
} from "../src/manifests/patrol-objects.js";
import { renderOverlayWith } from "./overlay-with.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const orchestrator = services.find((s) => s.kind === "orchestrator")!;
let renderings: Rendering[];

beforeAll(() => {
  renderings = ["dev", "prod"].map((overlay) => renderOverlayWith(root, overlay, ["patrol"]));
}, 60_000);

function find<T>(objects: readonly K8sObject[], kind: string, name: string): K8sObject & T {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  expect(found, `${kind} ${name}`).toBeDefined();
  return found as K8sObject & T;
}

const cronJob = (objects: readonly K8sObject[]) => find<CronJob>(objects, "CronJob", PATROL);
const pod = (objects: readonly K8sObject[]): PodSpec => cronJob(objects).spec!.jobTemplate.spec!.template.spec!;
const container = (objects: readonly K8sObject[]): Container => pod(objects).containers[0]!;
const flag = (args: readonly string[], name: string) => args[args.indexOf(name) + 1];

describe("the patrol CronJob", () => {
  it("runs once a day, one run at a time, bounded, not retried, and cleaned up", () => {
    for (const { name, objects } of renderings) {
      const spec = cronJob(objects).spec!;
      // Minute and hour fixed, every day of every month.
      expect(spec.schedule, name).toMatch(/^\d{1,2} \d{1,2} \* \* \*$/);
      expect(spec.suspend ?? false, name).toBe(false);
      expect(spec.concurrencyPolicy, name).toBe("Forbid");
      expect(spec.startingDeadlineSeconds, name).toBeGreaterThan(0);
      const job = spec.jobTemplate.spec!;
      expect(job.backoffLimit, name).toBeLessThanOrEqual(1);
      expect(job.activeDeadlineSeconds, name).toBeGreaterThan(0);
      expect(job.activeDeadlineSeconds!, name).toBeLessThanOrEqual(3600);
      expect(job.ttlSecondsAfterFinished, name).toBeGreaterThan(0);
    }
  });

  it("runs dry against the orchestrator's Service, on the overlay's orchestrator image, with a threshold", () => {
    for (const { name, objects } of renderings) {
      const c = container(objects);
      const deployed = find<{ spec: { template: { spec: PodSpec } } }>(objects, "Deployment", orchestrator.name).spec
        .template.spec.containers[0]!.image;
      expect(c.image, name).toBe(deployed);
      expect(c.image, name).toBe(
        name.startsWith("overlays/prod")
          ? "registry.example.com/loopguard/orchestrator:unset"
          : "loopguard/orchestrator:latest",
      );
      expect(c.command).toEqual(["node", "/app/dist/cli/patrol.js"]);
      // The image is the orchestrator package's build: the CLI is there at the same path under dist.
      expect(existsSync(join(orchestrator.dir, "dist", "cli", "patrol.js")), "pnpm build first").toBe(true);
      const args = c.args ?? [];
      expect(args, name).not.toContain("--live");
      expect(flag(args, "--orchestrator"), name).toBe(`${orchestrator.name}:${orchestrator.port}`);
      expect(Number(flag(args, "--threshold")), name).toBeGreaterThan(0);
    }
  });

  it("is hardened, bounded in resources, carries no API token and no secret in a variable", () => {
    for (const { name, objects } of renderings) {
      const p = pod(objects);
      const c = container(objects);
      expect(p.automountServiceAccountToken, name).toBe(false);
      expect(p.restartPolicy, name).toBe("Never");
      expect({ ...p.securityContext, ...c.securityContext }).toMatchObject({
        runAsNonRoot: true,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
        seccompProfile: { type: "RuntimeDefault" },
      });
      expect(c.resources?.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
      expect(c.resources?.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
      expect(c.env?.filter((e) => e.valueFrom !== undefined)).toEqual([]);
      expect(p.volumes?.map((v) => v.secret?.secretName ?? v.configMap?.name).sort()).toEqual(
        ["loopguard-jwks", PATROL_GOLDEN_CONFIG_MAP, PATROL_PEOPLE_SECRET].sort(),
      );
    }
  });

  it("reads the golden set of the repository, byte for byte, where --tasks points", () => {
    const golden = readFileSync(join(root, GOLDEN_SET_FILE), "utf8");
    for (const { name, objects } of renderings) {
      const map = find<ConfigMap>(objects, "ConfigMap", PATROL_GOLDEN_CONFIG_MAP);
      const c = container(objects);
      const mount = c.volumeMounts!.find((m) => m.name === PATROL_GOLDEN_CONFIG_MAP)!;
      const [item] = pod(objects).volumes!.find((v) => v.name === PATROL_GOLDEN_CONFIG_MAP)!.configMap!.items!;
      expect(map.data, name).toEqual({ [item!.key]: golden });
      expect(flag(c.args ?? [], "--tasks"), name).toBe(`${mount.mountPath}/${item!.path}`);
    }
  });
});

describe("the patrol's network", () => {
  const patrolFlows = (flows: ReturnType<typeof requiredFlows>) => flows.filter((f) => f.when === "patrol");

  it("reaches the orchestrator's gRPC port and DNS, admitted there; nothing else", () => {
    const required = patrolFlows(requiredFlows(services));
    const denied = patrolFlows(deniedFlows(services));
    expect(required.length).toBeGreaterThan(1);
    expect(denied.length).toBeGreaterThan(3);
    for (const rendering of renderings) {
      for (const flow of required.filter((f) => f.unless === undefined))
        expect(blocked(flow, rendering).failures, flow.why).toEqual([]);
      for (const flow of denied) {
        const { failures, tried } = blocked(flow, rendering);
        expect(failures.length, `${rendering.name}: ${flow.why}`).toBe(tried);
      }
    }
  });

  it("loses the orchestrator without its own policy: the check can fail", () => {
    const [dev] = renderings;
    const without = {
      ...dev!,
      objects: dev!.objects.filter((o) => !(o.kind === "NetworkPolicy" && o.metadata.name === "patrol")),
    };
    const toOrchestrator = patrolFlows(requiredFlows(services)).find((f) => "workload" in f.to)!;
    expect(blocked(toOrchestrator, without).failures).toEqual([expect.stringMatching(/50051\/TCP stopped at egress$/)]);
  });
});

describe("the rendered command line", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-patrol-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("starts the CLI: people's keys and JWKS read, golden set parsed, then the suite asked (here: nobody listens)", () => {
    const { name, objects } = renderings[0]!;
    const c = container(objects);
    const keys = ensureLocalKeys(dataDir);
    const args = (c.args ?? []).map((a, i, all) => {
      if (all[i - 1] === "--tasks") return join(root, GOLDEN_SET_FILE);
      // A loopback port nothing listens on (the discard port): the run gets as far as the first call.
      if (all[i - 1] === "--orchestrator") return "127.0.0.1:9";
      return a;
    });
    const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value!]));
    expect(Object.keys(env).sort(), name).toEqual(["LOOPGUARD_DATA_DIR", "LOOPGUARD_JWKS_FILE"]);
    const run = spawnSync(process.execPath, [join(orchestrator.dir, "dist", "cli", "patrol.js"), ...args], {
      cwd: root,
      encoding: "utf8",
      timeout: 30_000,
      env: { PATH: process.env.PATH, LOOPGUARD_DATA_DIR: dataDir, LOOPGUARD_JWKS_FILE: keys.jwks },
    });
    expect(run.stdout).toMatch(
      /^patrol: \d+ tasks from .* against 127\.0\.0\.1:9, \d+ at once, dry run \(no money moves\)/,
    );
    expect(run.stderr).toContain("cannot reach the orchestrator");
    expect(run.status).toBe(1);
  }, 40_000);
});
