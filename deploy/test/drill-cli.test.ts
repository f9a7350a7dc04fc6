// `pnpm drill` without containers: its argument errors, and the --k8s path's objects — the
// runner's Job and the PodChaos objects it would apply, printed by --dry-run and validated
// strictly as the shipped chaos-drills component is. (The launcher against a recording kubectl:
// drill-k8s-launch.test.ts.)
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Job } from "kubernetes-types/batch/v1.js";
import { describe, expect, it } from "vitest";
import { type K8sObject, validateRenderings } from "../src/manifests/renderings.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";
import { type Run, runProcess } from "./run-process.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

function drill(...args: string[]): Promise<Run> {
  return runProcess(process.execPath, [join(root, "deploy", "dist", "ops", "drills", "main.js"), ...args], {
    cwd: root,
    timeoutMs: 30_000,
  });
}

describe("pnpm drill arguments", () => {
  it("names a wrong argument in one line, prints the usage and exits 2, starting nothing", async () => {
    const result = await drill("kill-tool", "--tool", "kb-search", "--sessions", "lots");
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    const [first, usage] = result.stderr.split("\n");
    expect(first).toBe('drill: --sessions takes an integer in 1..1500, got "lots"');
    expect(usage).toMatch(/^usage: pnpm drill <scenario> --tool <name>/);
  });
});

describe("pnpm drill --k8s --dry-run", () => {
  it.each([
    [["kill-tool", "--tool", "kb-search"], 1, "all", "kb-search"],
    [["kill-tool", "--tool", "billing", "--kill", "one"], 1, "one", "billing"],
    [["kill-orchestrator"], 1, "one", "orchestrator"],
    [["flap", "--tool", "risk", "--duration", "20"], 4, "all", "risk"],
  ])(
    "%j prints the runner's Job and the PodChaos objects the runner would apply, each valid",
    async (args, count, mode, service) => {
      const json = await drill(...args, "--k8s", "--dry-run", "--json");
      expect(json.code).toBe(0);
      const [job, ...objects] = JSON.parse(json.stdout.trim().split("\n").at(-1)!) as K8sObject[];
      // The runner gets the scenario as its arguments, spelled out.
      expect(job).toMatchObject({ apiVersion: "batch/v1", kind: "Job", metadata: { namespace: "loopguard" } });
      const container = (job as unknown as Job).spec!.template.spec!.containers[0]!;
      expect(container.args!.slice(0, 3)).toEqual([args[0], "--tool", service]);
      expect(container.args).toContain("--k8s");
      expect(objects).toHaveLength(count);
      for (const object of objects) {
        expect(object).toMatchObject({
          apiVersion: "chaos-mesh.org/v1alpha1",
          kind: "PodChaos",
          metadata: { namespace: "loopguard" },
          spec: {
            action: "pod-kill",
            mode,
            gracePeriod: 0,
            selector: { labelSelectors: { "app.kubernetes.io/name": service } },
          },
        });
        // Not paused: a run's objects act as soon as they are created.
        expect((object.metadata as { annotations?: object }).annotations).toBeUndefined();
      }
      expect(validateRenderings([{ name: `drill ${args.join(" ")}`, objects: [job!, ...objects] }])).toEqual([]);

      const yaml = await drill(...args, "--k8s", "--dry-run");
      expect(yaml.code).toBe(0);
      const documents = parseYamlDocuments(yaml.stdout, "dry-run") as K8sObject[];
      expect(documents.slice(1).map((d) => d.spec)).toEqual(objects.map((o) => o.spec));
    },
  );

  it("the schema refuses what Chaos Mesh would not read", () => {
    const valid = {
      apiVersion: "chaos-mesh.org/v1alpha1",
      kind: "PodChaos",
      metadata: { name: "x", namespace: "loopguard" },
      spec: { action: "pod-kill", mode: "all", selector: { namespaces: ["loopguard"], labelSelectors: { app: "x" } } },
    };
    const errors = validateRenderings([
      {
        name: "bad",
        objects: [
          { ...valid, spec: { ...valid.spec, mode: "most" } },
          { ...valid, spec: { ...valid.spec, gracePeriod: 0, graceperiod: 1 } },
        ],
      },
    ]);
    expect(errors.map((e) => e.message)).toEqual([
      expect.stringContaining("/spec/mode must be equal to one of the allowed values"),
      expect.stringContaining("/spec must NOT have additional properties (graceperiod)"),
    ]);
  });
});
