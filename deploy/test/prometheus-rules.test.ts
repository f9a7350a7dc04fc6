// The committed Prometheus files are what the contracts generate, and Prometheus's own tool
// accepts them: rules and config parse, and the alert unit tests (hand-written scenarios and the
// generated per-method cases) pass.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { describe, expect, it } from "vitest";
import { renderGeneratedFiles } from "../src/manifests/generated-files.js";
import { COMPONENTS_DIR } from "../src/manifests/generated-components.js";
import { AGENT_RULE_GROUP } from "../src/manifests/agent-rules.js";
import {
  committedAlertTests,
  committedRuleFiles,
  LOCAL_CONFIG_FILE,
  PROMETHEUS_DIR,
  RULES_DIR,
  ruleFileOf,
  SLO_ALERT_TESTS_DIR,
  sloAlertTestsOf,
} from "../src/manifests/prometheus-files.js";
import { parseYamlDocuments, toYaml } from "../src/manifests/yaml.js";
import { findExecutable } from "./promtool.js";
import { runProcess } from "./run-process.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const promtool = findExecutable("promtool");
if (!promtool)
  console.warn("skipping promtool checks: promtool not found on PATH (install the Debian package `prometheus`)");

/**
 * The alert unit tests take 26-28 s of CPU across their files on two cores at a load average of ~10
 * (150-160 s when every file loaded every rule group; measured): run asynchronously (see
 * run-process.ts), within four minutes.
 */
const PROMTOOL_TIMEOUT_MS = 240_000;
async function runPromtool(...args: string[]): Promise<{ status: number; output: string }> {
  const { code, stdout, stderr } = await runProcess(promtool!, args, { cwd: root, timeoutMs: PROMTOOL_TIMEOUT_MS });
  return { status: code, output: `${stdout}${stderr}` };
}

describe("generated Prometheus files", () => {
  it("are up to date with the contracts and the services' ports (run `pnpm gen` if not)", () => {
    const { files } = renderGeneratedFiles(root, contractFiles);
    const paths = [...files.keys()].filter((path) => path.startsWith(`${PROMETHEUS_DIR}${sep}`));
    expect(paths).toEqual(
      expect.arrayContaining([LOCAL_CONFIG_FILE, ruleFileOf(AGENT_RULE_GROUP), sloAlertTestsOf("billing")]),
    );
    for (const path of paths) expect(readFileSync(join(root, path), "utf8"), path).toBe(files.get(path));
    // Nothing left over from a removed tool: its old tests would still run here, on rules Prometheus no longer loads.
    const committed = [RULES_DIR, SLO_ALERT_TESTS_DIR].flatMap((dir) =>
      readdirSync(join(root, dir)).map((name) => join(dir, name)),
    );
    expect(committed.filter((path) => !files.has(path))).toEqual([]);
  });
});

describe.skipIf(!promtool)("promtool", () => {
  it("accepts the rule files", async () => {
    const ruleFiles = committedRuleFiles(root);
    const { status, output } = await runPromtool("check", "rules", ...ruleFiles);
    expect(output.match(/SUCCESS: \d+ rules found/g), output).toHaveLength(ruleFiles.length);
    expect(status, output).toBe(0);
  });

  it("accepts the local scrape config and the rule files it loads, one per rule group", async () => {
    const { status, output } = await runPromtool("check", "config", LOCAL_CONFIG_FILE);
    expect(status, output).toBe(0);
    const ruleFiles = committedRuleFiles(root);
    expect(ruleFiles).toEqual(
      expect.arrayContaining([ruleFileOf("loopguard-slo-billing"), ruleFileOf(AGENT_RULE_GROUP)]),
    );
    expect(output).toContain(`${ruleFiles.length} rule files found`);
  });

  it("accepts the release analysis queries (the AnalysisTemplates' PromQL, with a pod-template hash filled in)", async () => {
    const dir = join(root, COMPONENTS_DIR, "argo-rollouts");
    type Template = {
      kind: string;
      metadata: { name: string };
      spec: { metrics: { name: string; provider: { prometheus?: { query: string } } }[] };
    };
    const templates = readdirSync(dir)
      .flatMap((name) => parseYamlDocuments(readFileSync(join(dir, name), "utf8"), name) as Template[])
      .filter((o) => o.kind === "AnalysisTemplate")
      .map((t) => ({ ...t, spec: { metrics: t.spec.metrics.filter((m) => m.provider.prometheus) } }));
    const record = (t: Template, m: { name: string }) =>
      `analysis:${`${t.metadata.name}_${m.name}`.replaceAll("-", "_")}`;
    const rules = templates.flatMap((t) =>
      t.spec.metrics.map((m) => ({
        record: record(t, m),
        expr: m.provider.prometheus!.query.replaceAll("{{args.pod-template-hash}}", "6d4b9c8f7"),
      })),
    );
    expect(rules.length).toBeGreaterThanOrEqual(6);
    const scratch = mkdtempSync(join(tmpdir(), "loopguard-analysis-"));
    try {
      writeFileSync(
        join(scratch, "analysis.yml"),
        toYaml({
          groups: templates.map((t, i) => ({
            name: `analysis-${i}`,
            rules: rules.filter((r) => t.spec.metrics.some((m) => r.record === record(t, m))),
          })),
        }),
      );
      const { status, output } = await runPromtool("check", "rules", join(scratch, "analysis.yml"));
      expect(output).toContain("SUCCESS");
      expect(status, output).toBe(0);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it(
    "passes the alert unit tests: each alert fires on a breach and stays silent otherwise",
    async () => {
      // One promtool per file, side by side: each file is CPU-bound for seconds, and one promtool
      // works through its files one after another on one core.
      const files = committedAlertTests(root);
      expect(files.length).toBeGreaterThanOrEqual(9);
      const runs = await Promise.all(files.map((file) => runPromtool("test", "rules", file)));
      for (const [i, { status, output }] of runs.entries()) {
        expect(status, `${files[i]}: ${output}`).toBe(0);
        expect(output, files[i]).toContain("SUCCESS");
      }
    },
    PROMTOOL_TIMEOUT_MS,
  );
});
