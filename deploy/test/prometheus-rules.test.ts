// The committed Prometheus files are what the contracts generate, and Prometheus's own tool
// accepts them: rules and config parse, and the alert unit tests (hand-written scenarios and the
// generated per-method cases) pass.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { describe, expect, it } from "vitest";
import { renderGeneratedFiles } from "../src/manifests/generated-files.js";
import { COMPONENTS_DIR } from "../src/manifests/generated-components.js";
import {
  LOCAL_CONFIG_FILE,
  HAND_WRITTEN_ALERT_TESTS,
  RULES_FILE,
  SLO_ALERT_TESTS_FILE,
} from "../src/manifests/prometheus-files.js";
import { parseYamlDocuments, toYaml } from "../src/manifests/yaml.js";
import { findExecutable } from "./promtool.js";
import { runProcess } from "./run-process.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const promtool = findExecutable("promtool");
if (!promtool)
  console.warn("skipping promtool checks: promtool not found on PATH (install the Debian package `prometheus`)");

/**
 * The alert unit tests take about a minute on a loaded machine, and up to 90 s of CI's (measured):
 * run asynchronously (see run-process.ts), within four minutes.
 */
const PROMTOOL_TIMEOUT_MS = 240_000;
async function runPromtool(...args: string[]): Promise<{ status: number; output: string }> {
  const { code, stdout, stderr } = await runProcess(promtool!, args, { cwd: root, timeoutMs: PROMTOOL_TIMEOUT_MS });
  return { status: code, output: `${stdout}${stderr}` };
}

describe("generated Prometheus files", () => {
  it("are up to date with the contracts and the services' ports (run `pnpm gen` if not)", () => {
    const { files } = renderGeneratedFiles(root, contractFiles);
    const paths = [LOCAL_CONFIG_FILE, RULES_FILE, SLO_ALERT_TESTS_FILE];
    expect([...files.keys()]).toEqual(expect.arrayContaining(paths));
    for (const path of paths) expect(readFileSync(join(root, path), "utf8"), path).toBe(files.get(path));
  });
});

describe.skipIf(!promtool)("promtool", () => {
  it("accepts the SLO rules", async () => {
    const { status, output } = await runPromtool("check", "rules", RULES_FILE);
    expect(output).toContain("SUCCESS");
    expect(status, output).toBe(0);
  });

  it("accepts the local scrape config and the rule file it loads", async () => {
    const { status, output } = await runPromtool("check", "config", LOCAL_CONFIG_FILE);
    expect(status, output).toBe(0);
    expect(output).toContain("1 rule files found");
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
      // One promtool per file, side by side: each file is CPU-bound for tens of seconds, and one
      // promtool works through its files one after another on one core.
      const files = [...HAND_WRITTEN_ALERT_TESTS, SLO_ALERT_TESTS_FILE];
      const runs = await Promise.all(files.map((file) => runPromtool("test", "rules", file)));
      for (const [i, { status, output }] of runs.entries()) {
        expect(status, `${files[i]}: ${output}`).toBe(0);
        expect(output, files[i]).toContain("SUCCESS");
      }
    },
    PROMTOOL_TIMEOUT_MS,
  );
});
