// Every alert the generator writes is documented and tested: its runbook_url names a section of
// the runbooks that exists, and promtool's unit tests hold a case where it fires and one where it
// stays quiet. A new alert without both fails here, before anyone is paged by it. Each promtool
// test file loads only some rule groups, and promtool passes a quiet case of an alert it did not
// load: each file must load every alert it names.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { RUNBOOK_DOC } from "../src/manifests/alert-conventions.js";
import {
  committedAlertTests,
  committedRuleFiles,
  HAND_WRITTEN_ALERT_TESTS,
  PROMETHEUS_DIR,
} from "../src/manifests/prometheus-files.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TEST_FILES = committedAlertTests(root);

type Rule = { alert?: string; record?: string; expr: string; annotations?: Record<string, string> };
type Alert = Rule & { alert: string };
type RuleGroup = { name: string; rules: Rule[] };
type AlertCase = { alertname: string; exp_alerts?: unknown[] };
type TestFile = {
  rule_files: string[];
  tests: { alert_rule_test?: AlertCase[]; promql_expr_test?: { expr: string }[] }[];
};

function readYaml<T>(path: string): T {
  return parseYamlDocuments(readFileSync(join(root, path), "utf8"), path)[0] as T;
}

const groupsOf = (ruleFile: string) => readYaml<{ groups: RuleGroup[] }>(ruleFile).groups;
const isAlert = (r: Rule): r is Alert => typeof r.alert === "string";
/** The recorded series an expression reads (the recording rules' names hold a colon, raw metrics none). */
const recordsIn = (expr: string) => expr.match(/\b[a-z_]+:[a-z0-9_:]+/g) ?? [];

const groups = committedRuleFiles(root).flatMap(groupsOf);
const alerts = groups.flatMap((g) => g.rules).filter(isAlert);

const testFiles = TEST_FILES.map((path) => ({ path, ...readYaml<TestFile>(path) }));
const cases = testFiles.flatMap((file) => file.tests.flatMap((t) => t.alert_rule_test ?? []));

/** GitHub's heading anchors (github-slugger): the heading's text, lower case, punctuation dropped, spaces as hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split("\n")) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const text = heading[1]!.replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/[`*]/g, "");
    const slug = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M} _-]/gu, "")
      .replace(/ /g, "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

describe("headingAnchors", () => {
  it("makes the anchors GitHub makes", () => {
    const doc =
      "# Runbooks: loopguard's alerts\n## `<Tool>Down`\n```sh\n# not a heading\n```\n### Drills: [fault](x.md) injection\n## `<Tool>Down`\n";
    expect([...headingAnchors(doc)]).toEqual([
      "runbooks-loopguards-alerts",
      "tooldown",
      "drills-fault-injection",
      "tooldown-1",
    ]);
  });
});

describe("the generated alerts", () => {
  it("are all read from the rule files the local config loads", () => {
    expect(alerts.length).toBeGreaterThan(40);
    expect(alerts.map((a) => a.alert)).toEqual(
      expect.arrayContaining(["KbSearchDown", "BillingRefundErrorBudgetFastBurn", "ToolBreakerOpen"]),
    );
  });

  it("each point to a section of the runbooks that exists", () => {
    const anchors = headingAnchors(readFileSync(join(root, RUNBOOK_DOC), "utf8"));
    const broken = alerts.filter((a) => {
      const [doc, anchor] = (a.annotations?.runbook_url ?? "").split("#");
      return doc !== RUNBOOK_DOC || !anchor || !anchors.has(anchor);
    });
    expect(
      broken.map((a) => `${a.alert}: ${a.annotations?.runbook_url}`),
      `add a section to ${RUNBOOK_DOC}`,
    ).toEqual([]);
  });

  it("each have a promtool case where they fire and one where they do not", () => {
    const firing = new Set(cases.filter((c) => (c.exp_alerts ?? []).length > 0).map((c) => c.alertname));
    const quiet = new Set(cases.filter((c) => (c.exp_alerts ?? []).length === 0).map((c) => c.alertname));
    const names = alerts.map((a) => a.alert);
    expect(
      names.filter((n) => !firing.has(n)),
      "alerts never shown firing",
    ).toEqual([]);
    expect(
      names.filter((n) => !quiet.has(n)),
      "alerts never shown quiet",
    ).toEqual([]);
  });

  it("are the only alerts the promtool cases name (a renamed alert would leave its quiet cases passing vacuously)", () => {
    const names = new Set(alerts.map((a) => a.alert));
    expect([...new Set(cases.map((c) => c.alertname))].filter((n) => !names.has(n))).toEqual([]);
  });

  it("read only the recorded series of their own group, so a test file that loads an alert's group evaluates all it reads", () => {
    const foreign = groups.flatMap((g) => {
      const recorded = new Set(g.rules.flatMap((r) => (r.record ? [r.record] : [])));
      return g.rules.filter(isAlert).flatMap((a) =>
        recordsIn(a.expr)
          .filter((name) => !recorded.has(name))
          .map((name) => `${a.alert}: ${name}`),
      );
    });
    expect(foreign).toEqual([]);
    expect(alerts.some((a) => recordsIn(a.expr).length > 0)).toBe(true);
  });
});

describe("the promtool test files", () => {
  it("each load every alert they name and every recorded series their expressions read (promtool passes a quiet case of an alert it did not load)", () => {
    const missing = testFiles.flatMap((file) => {
      const loaded = file.rule_files
        .flatMap((f) => groupsOf(normalize(join(dirname(file.path), f))))
        .flatMap((g) => g.rules);
      const names = new Set(loaded.flatMap((r) => [r.alert, r.record]).filter((n) => n !== undefined));
      const named = file.tests.flatMap((t) => [
        ...(t.alert_rule_test ?? []).map((c) => c.alertname),
        ...(t.promql_expr_test ?? []).flatMap((e) => recordsIn(e.expr)),
      ]);
      return [...new Set(named)].filter((n) => !names.has(n)).map((n) => `${file.path}: ${n}`);
    });
    expect(missing).toEqual([]);
  });

  it("are all run: the hand-written ones listed are those in the folder", () => {
    const onDisk = readdirSync(join(root, PROMETHEUS_DIR)).filter((f) => f.endsWith(".test.yml"));
    expect(onDisk.map((f) => join(PROMETHEUS_DIR, f)).sort()).toEqual([...HAND_WRITTEN_ALERT_TESTS].sort());
  });
});
