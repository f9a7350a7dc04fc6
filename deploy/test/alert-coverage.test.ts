// Every alert the generator writes is documented and tested: its runbook_url names a section of
// the runbooks that exists, and promtool's unit tests hold a case where it fires and one where it
// stays quiet. A new alert without both fails here, before anyone is paged by it.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { RUNBOOK_DOC } from "../src/manifests/alert-conventions.js";
import { HAND_WRITTEN_ALERT_TESTS, RULES_FILE, SLO_ALERT_TESTS_FILE } from "../src/manifests/prometheus-files.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TEST_FILES = [...HAND_WRITTEN_ALERT_TESTS, SLO_ALERT_TESTS_FILE];

type Alert = { alert: string; annotations?: Record<string, string> };
type AlertCase = { alertname: string; exp_alerts?: unknown[] };

function readYaml<T>(path: string): T {
  return parseYamlDocuments(readFileSync(join(root, path), "utf8"), path)[0] as T;
}

const alerts = readYaml<{ groups: { rules: Partial<Alert>[] }[] }>(RULES_FILE)
  .groups.flatMap((g) => g.rules)
  .filter((r): r is Alert => typeof r.alert === "string");

const cases = TEST_FILES.flatMap((file) =>
  readYaml<{ tests: { alert_rule_test?: AlertCase[] }[] }>(file).tests.flatMap((t) => t.alert_rule_test ?? []),
);

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
  it("are all read from rules.yml", () => {
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
});
