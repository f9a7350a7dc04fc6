// `pnpm drill … --k8s` against a recording kubectl (test/fake-kubectl.mjs on PATH), as no cluster
// runs here: it reads the chaos-drills component's template as rendered for prod, creates one Job
// of it with the scenario as its arguments and the overlay's image, follows its log, writes the
// report the runner printed, and exits with the Job's result. Every kubectl call is within
// LAUNCHER_API_CALLS, the Role a person running drills is bound to.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { CronJob, Job } from "kubernetes-types/batch/v1.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LAUNCHER_API_CALLS } from "../src/manifests/drill-api-calls.js";
import { parseDrillArgs } from "../src/ops/drills/options.js";
import { computeReport } from "../src/ops/drills/report.js";
import { renderOverlayWith } from "./overlay-with.js";
import { type Run, runProcess } from "./run-process.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
let fake: string;
let cronJob: CronJob;

beforeAll(() => {
  // Rendered with the real kubectl, before the fake goes on PATH.
  const rendering = renderOverlayWith(root, "prod", ["chaos-drills"]);
  cronJob = rendering.objects.find((o) => o.kind === "CronJob") as unknown as CronJob;
  fake = mkdtempSync(join(tmpdir(), "loopguard-fake-kubectl-"));
  writeFileSync(
    join(fake, "kubectl"),
    `#!/bin/sh\nexec "${process.execPath}" "${join(here, "fake-kubectl.mjs")}" "$@"\n`,
  );
  chmodSync(join(fake, "kubectl"), 0o755);
}, 60_000);

afterAll(() => rmSync(fake, { recursive: true, force: true }));
afterEach(() => rmSync(join(fake, "calls.jsonl"), { force: true }));

const catalogue = {
  tools: ["kb-search", "billing", "risk"],
  orchestrator: "orchestrator",
  methodsOf: () => ["Search"],
};
const report = computeReport({
  options: parseDrillArgs(["kill-tool", "--tool", "kb-search", "--k8s"], catalogue),
  outcomes: [],
  audit: {
    method: "m",
    refundsInLedger: 0,
    refundsReported: 0,
    duplicate: 0,
    lost: 0,
    unowned: 0,
    doneRefundsExactlyOnce: 0,
    examples: [],
  },
  tools: {},
  deadWindows: [],
  faults: [{ atMs: 1200, what: "PodChaos drill-x-1: pod-kill of every kb-search pod (2 ready)" }],
  approvalsResolved: 0,
  parks: 0,
  boundMs: 100_000,
  runtimeMs: 20_000,
  runnerCpuMs: 900,
  containers: { "kb-search": 2 },
  notes: ["figures summed over every orchestrator replica's own page"],
});

/** One `pnpm drill` run's limit. */
const DRILL_TIMEOUT_MS = 60_000;

function drill(dataDir: string, scenario: object, ...args: string[]): Promise<Run> {
  writeFileSync(join(fake, "scenario.json"), JSON.stringify({ cronJob, ...scenario }));
  const env = {
    ...process.env,
    PATH: `${fake}${delimiter}${process.env.PATH}`,
    FAKE_KUBECTL_DIR: fake,
    LOOPGUARD_DATA_DIR: dataDir,
  };
  return runProcess(process.execPath, [join(root, "deploy", "dist", "ops", "drills", "main.js"), ...args], {
    cwd: root,
    env,
    timeoutMs: DRILL_TIMEOUT_MS,
  });
}

function calls(): { args: string[]; stdin: string }[] {
  return readFileSync(join(fake, "calls.jsonl"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

/** What RBAC sees of a kubectl call: verb and resource. */
function apiCallsOf(
  args: readonly string[],
): { group: string; resource: string; verb: string; resourceName?: string }[] {
  if (args.includes("lease"))
    return [
      { group: "coordination.k8s.io", resource: "leases", verb: "get", resourceName: args[args.indexOf("lease") + 1]! },
    ];
  if (args.includes("create")) return [{ group: "batch", resource: "jobs", verb: "create" }];
  if (args.includes("cronjob")) return [{ group: "batch", resource: "cronjobs", verb: "get" }];
  if (args.includes("get") && args.includes("job")) return [{ group: "batch", resource: "jobs", verb: "get" }];
  if (args.includes("delete")) return [{ group: "batch", resource: "jobs", verb: "delete" }];
  // `logs -f job/x`: the Job, its pods by selector (listed and watched until one runs), the log.
  if (args.includes("logs"))
    return [
      { group: "batch", resource: "jobs", verb: "get" },
      { group: "", resource: "pods", verb: "list" },
      { group: "", resource: "pods", verb: "watch" },
      { group: "", resource: "pods", verb: "get" },
      { group: "", resource: "pods/log", verb: "get" },
    ];
  throw new Error(`unexpected kubectl call: ${args.join(" ")}`);
}

// A test's limit is its runs' (up to three), not the project's 30 s: each run is a node process that
// spawns one per kubectl call, and three went past 30 s in CI with the image builds running beside them.
describe("pnpm drill --k8s", { timeout: 3 * DRILL_TIMEOUT_MS }, () => {
  it("creates one Job of the cluster's template with the scenario as arguments, prints its report and exits 0 when it completes", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-drill-launch-"));
    try {
      const line = JSON.stringify({
        drill_report: report,
        run_id: "kill-tool-kb-search-20261201T220000",
        started_at: "2026-12-01T22:00:00.000Z",
      });
      const result = await drill(
        dataDir,
        {
          jobs: ["Complete"],
          logs: ["starting 200 sessions at once", "[   1.2 s] PodChaos drill-x-1: pod-kill", line],
        },
        "kill-tool",
        "--tool",
        "kb-search",
        "--sessions",
        "300",
        "--k8s",
      );
      expect(result.stderr).toContain("[   1.2 s] PodChaos drill-x-1: pod-kill");
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/^drill kill-tool kb-search: 0\/0 sessions ended/);

      const made = calls();
      const created = made.filter((c) => c.args.includes("create"));
      expect(created).toHaveLength(1);
      const job = JSON.parse(created[0]!.stdin) as Job;
      const container = job.spec!.template.spec!.containers[0]!;
      expect(container.args).toEqual([
        "kill-tool",
        "--tool",
        "kb-search",
        "--kill",
        "all",
        "--sessions",
        "300",
        "--duration",
        "10",
        "--refund-share",
        "50",
        "--k8s",
      ]);
      // The overlay's image and the template's identity: what the cluster was given, not a second copy.
      expect(container.image).toBe(cronJob.spec!.jobTemplate.spec!.template.spec!.containers[0]!.image);
      expect(container.image).toBe("registry.example.com/loopguard/drill-runner:unset");
      expect(job.spec!.template.spec!.serviceAccountName).toBe("loopguard-drill-runner");
      expect(job.spec!.backoffLimit).toBe(0);
      expect(job.metadata!.name).toMatch(/^drill-kill-tool-kb-search-\d{8}t\d{6}$/);
      expect(made.find((c) => c.args.includes("logs"))!.args).toEqual([
        "-n",
        "loopguard",
        "logs",
        "-f",
        `job/${job.metadata!.name}`,
        "--pod-running-timeout=5m",
      ]);

      const saved = JSON.parse(
        readFileSync(join(dataDir, "drills", "kill-tool-kb-search-20261201T220000", "report.json"), "utf8"),
      );
      expect(saved.faults).toEqual(report.faults);
      expect(
        readFileSync(join(dataDir, "drills", "kill-tool-kb-search-20261201T220000", "report.md"), "utf8"),
      ).toContain("figures summed over every orchestrator replica");

      for (const call of made.flatMap((c) => apiCallsOf(c.args))) expect(LAUNCHER_API_CALLS).toContainEqual(call);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("refuses at once, creating no Job, while another drill holds the cluster's Lease; a lapsed Lease does not stop it", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-drill-launch-"));
    const lease = (agoS: number) => {
      const renewed = new Date(Date.now() - agoS * 1000).toISOString();
      return {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name: "loopguard-drill", namespace: "loopguard", resourceVersion: "7" },
        spec: {
          holderIdentity: "kill-tool-billing-20261206T030000",
          acquireTime: renewed,
          renewTime: renewed,
          leaseDurationSeconds: 60,
        },
      };
    };
    try {
      const held = await drill(dataDir, { jobs: [], lease: lease(10) }, "kill-tool", "--tool", "kb-search", "--k8s");
      expect(held.code).toBe(1);
      expect(held.stderr.trim().split("\n").at(-1)).toMatch(
        /^drill: another drill runs on this cluster: kill-tool-billing-20261206T030000, since .* \(Lease loopguard\/loopguard-drill, renewed /,
      );
      expect(calls().map((c) => c.args.join(" "))).toEqual([
        "-n loopguard get lease loopguard-drill -o json --ignore-not-found",
      ]);
      rmSync(join(fake, "calls.jsonl"), { force: true });
      const lapsed = await drill(
        dataDir,
        { jobs: ["Failed"], logs: ["drill-runner: stopped"], lease: lease(61) },
        "kill-tool",
        "--tool",
        "kb-search",
        "--k8s",
      );
      expect(lapsed.stderr).toContain("Job drill-kill-tool-kb-search-");
      expect(calls().filter((c) => c.args.includes("create"))).toHaveLength(1);
      for (const call of calls().flatMap((c) => apiCallsOf(c.args))) expect(LAUNCHER_API_CALLS).toContainEqual(call);
      // A person's Role bound before the launcher read the Lease: let through to the runner's own check.
      rmSync(join(fake, "calls.jsonl"), { force: true });
      const unread = await drill(
        dataDir,
        { jobs: ["Failed"], logs: ["drill-runner: stopped"], lease: "forbidden" },
        "kill-tool",
        "--tool",
        "kb-search",
        "--k8s",
      );
      expect(unread.stderr).toContain(
        "cannot read Lease loopguard/loopguard-drill (Forbidden): the runner checks that no other drill runs",
      );
      expect(calls().filter((c) => c.args.includes("create"))).toHaveLength(1);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("exits 1 with the runner's last line when the Job fails, and writes no report", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-drill-launch-"));
    try {
      const result = await drill(
        dataDir,
        {
          jobs: ["Failed"],
          logs: [
            "drill-runner: kill-orchestrator needs at least 2 ready orchestrator pods in namespace loopguard; the cluster has 1",
          ],
        },
        "kill-orchestrator",
        "--k8s",
        "--prometheus",
        "http://prometheus-operated.monitoring.svc:9090",
      );
      expect(result.code).toBe(1);
      expect(result.stdout).toBe("");
      expect(result.stderr.trim().split("\n").at(-1)).toMatch(
        /^drill: Job drill-kill-orchestrator-orchestrator-\S+ failed: drill-runner: kill-orchestrator needs at least 2 ready/,
      );
      const job = JSON.parse(calls().find((c) => c.args.includes("create"))!.stdin) as Job;
      expect(job.spec!.template.spec!.containers[0]!.args).toEqual([
        "kill-orchestrator",
        "--tool",
        "orchestrator",
        "--sessions",
        "200",
        "--duration",
        "10",
        "--refund-share",
        "50",
        "--k8s",
        "--prometheus",
        "http://prometheus-operated.monitoring.svc:9090",
      ]);
      expect(existsSync(join(dataDir, "drills"))).toBe(false);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
