import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { contractFiles } from "@loopguard/proto";
import { methodPolicy, servicePolicy, smokeCallOf, status, toolServicesOf } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import {
  BURN_WINDOWS,
  ERROR_RATIO_RECORD,
  errorRatioRecord,
  P95_RECORD,
  pascalCase,
  type Rule,
  SERVER_FAULT_CODES,
  sloRuleGroups,
} from "./slo-rules.js";
import { parseSloOverrides } from "./slo-overrides.js";
import { parseYamlDocuments, toYaml } from "./yaml.js";

const services = [KbSearchService, BillingService, RiskService, OrchestratorService];

function alerts(file = sloRuleGroups(services)): Map<string, Rule> {
  return new Map(
    file.groups
      .flatMap((g) => g.rules)
      .filter((r) => "alert" in r)
      .map((r) => [String(r.alert), r]),
  );
}

describe("sloRuleGroups", () => {
  it("gives every unary method a latency alert and two burn-rate alerts at its contract's numbers", () => {
    const byName = alerts();
    for (const service of services) {
      const tool = pascalCase(servicePolicy(service).toolName);
      for (const method of service.methods.filter((m) => m.methodKind === "unary")) {
        const sla = methodPolicy(method).sla!;
        const at = (burn: number) => String(Number((burn * sla.errorRateBudget).toPrecision(6))).replace(".", "\\.");
        expect(byName.get(`${tool}${method.name}LatencyAboveSlo`)?.expr).toMatch(
          new RegExp(` > ${sla.p95TargetMs / 1000}$`),
        );
        const fast = String(byName.get(`${tool}${method.name}ErrorBudgetFastBurn`)?.expr);
        expect(fast).toMatch(
          new RegExp(
            `rate1h\\{[^}]*grpc_method="${method.name}"\\} > ${at(14.4)}\nand\n[^\n]*rate5m\\{[^}]*\\} > ${at(14.4)}\n`,
          ),
        );
        const slow = String(byName.get(`${tool}${method.name}ErrorBudgetSlowBurn`)?.expr);
        expect(slow).toMatch(
          new RegExp(
            `rate6h\\{[^}]*grpc_method="${method.name}"\\} > ${at(6)}\nand\n[^\n]*rate30m\\{[^}]*\\} > ${at(6)}\n`,
          ),
        );
      }
    }
    expect(byName.get("KbSearchSearchLatencyAboveSlo")).toMatchObject({
      expr: `${P95_RECORD}{grpc_service="loopguard.kb.v1.KbSearchService",grpc_method="Search"} > 0.3`,
      for: "5m",
      labels: { severity: "warning", tool: "kb-search", method: "Search" },
    });
  });

  it("pages on a fast burn and files a ticket on a slow one, each only past 20 calls an hour", () => {
    const byName = alerts();
    const target = '{grpc_service="loopguard.billing.v1.BillingService",grpc_method="Refund"}';
    expect(byName.get("BillingRefundErrorBudgetFastBurn")).toMatchObject({
      expr: [
        `loopguard:grpc_server_error_ratio:rate1h${target} > 0.072`,
        "and",
        `loopguard:grpc_server_error_ratio:rate5m${target} > 0.072`,
        "and on (grpc_service, grpc_method)",
        `sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total${target}[1h])) >= 20`,
      ].join("\n"),
      for: "2m",
      labels: { severity: "critical", tool: "billing", method: "Refund" },
    });
    expect(byName.get("BillingRefundErrorBudgetSlowBurn")).toMatchObject({
      for: "15m",
      labels: { severity: "warning", tool: "billing", method: "Refund" },
    });
    expect(String(byName.get("BillingRefundErrorBudgetSlowBurn")!.expr)).toMatch(/\[6h\]\)\) >= 120$/);
  });

  it("records the error ratio per method over every burn-rate window, and over the release analysis's 3 minutes", () => {
    for (const group of sloRuleGroups([KbSearchService, BillingService]).groups) {
      const records = group.rules.filter((r) => "record" in r).map((r) => r.record);
      expect(records).toEqual([P95_RECORD, ERROR_RATIO_RECORD, ...BURN_WINDOWS.map(errorRatioRecord)]);
    }
    expect(BURN_WINDOWS.map(errorRatioRecord)).toEqual(
      ["5m", "1h", "30m", "6h"].map((w) => `loopguard:grpc_server_error_ratio:rate${w}`),
    );
  });

  it("skips streaming methods: a stream's duration is its life, not a latency", () => {
    const names = [...alerts().keys()];
    expect(names.some((n) => n.includes("WatchSession"))).toBe(false);
    const orchestrator = sloRuleGroups([OrchestratorService]).groups[0]!;
    for (const rule of orchestrator.rules.filter((r) => "record" in r))
      expect(String(rule.expr)).not.toContain("WatchSession");
  });

  it("gives every tool a Down alert on its scrape job: none answering, one failing or flapping after it answered, no target at all", () => {
    expect(alerts().get("RiskDown")).toMatchObject({
      expr: [
        '(up{job="risk"} == 0 unless on (job) up{job="risk"} == 1)',
        '(up{job="risk"} == 0 and resets(up{job="risk"}[1h]) > 0)',
        '(avg_over_time(up{job="risk"}[5m]) < 0.9 and resets(up{job="risk"}[5m]) > 0)',
        'absent(up{job="risk"})',
      ].join("\nor\n"),
      for: "1m",
      labels: { severity: "critical", tool: "risk" },
    });
    expect(sloRuleGroups(services).groups.map((g) => g.name)).toEqual([
      "loopguard-slo-kb-search",
      "loopguard-slo-billing",
      "loopguard-slo-risk",
      "loopguard-slo-orchestrator",
    ]);
  });

  it("pages for every unary method whose calls all failed in the hour, at least 3, where the burn-rate floor leaves it silent; a cancelled call is no answer", () => {
    expect(alerts().get("BillingRefundAllCallsFailing")).toMatchObject({
      expr:
        'sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total{grpc_service="loopguard.billing.v1.BillingService",grpc_method="Refund",grpc_code=~"UNKNOWN|DEADLINE_EXCEEDED|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS"}[1h])) >= 3\n' +
        "unless on (grpc_service, grpc_method)\n" +
        'sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total{grpc_service="loopguard.billing.v1.BillingService",grpc_method="Refund",grpc_code!~"UNKNOWN|DEADLINE_EXCEEDED|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS|CANCELLED"}[1h])) > 0',
      for: "15m",
      labels: { severity: "critical", tool: "billing", method: "Refund" },
    });
  });

  it("counts only server-fault codes against the error budget, in every window", () => {
    const ratios = sloRuleGroups([BillingService]).groups[0]!.rules.filter((r) =>
      String(r.record).startsWith("loopguard:grpc_server_error_ratio:"),
    );
    expect(ratios).toHaveLength(1 + BURN_WINDOWS.length);
    for (const ratio of ratios) {
      expect(String(ratio.expr)).toContain(
        'grpc_code=~"UNKNOWN|DEADLINE_EXCEEDED|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS"',
      );
      for (const callerCode of [
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "PERMISSION_DENIED",
        "FAILED_PRECONDITION",
        "RESOURCE_EXHAUSTED",
      ]) {
        expect(String(ratio.expr)).not.toContain(callerCode);
      }
    }
  });

  it("applies deploy overrides to the numbers and says so in the description", () => {
    const byName = alerts(
      sloRuleGroups(services, {
        "kb-search/Search": { p95TargetMs: 450 },
        "billing/Refund": { errorRateBudget: 0.02 },
      }),
    );
    const latency = byName.get("KbSearchSearchLatencyAboveSlo")!;
    expect(latency.expr).toMatch(/ > 0\.45$/);
    expect((latency.annotations as Record<string, string>).description).toContain(
      "p95 <= 450 ms, timeout 1000 ms (deploy override)",
    );
    expect(byName.get("KbSearchSearchErrorBudgetFastBurn")!.expr).toContain(" > 0.144\n");
    expect(byName.get("BillingRefundErrorBudgetFastBurn")!.expr).toContain(" > 0.288\n");
    expect(byName.get("BillingRefundErrorBudgetSlowBurn")!.expr).toContain(" > 0.12\n");
    expect((byName.get("BillingRefundErrorBudgetFastBurn")!.annotations as Record<string, string>).summary).toContain(
      "2% error budget 14.4× too fast",
    );
  });

  it("refuses a budget so large that even every call failing burns it slower than the page's 14.4×, so the page could never fire", () => {
    expect(() => sloRuleGroups(services, { "billing/Refund": { errorRateBudget: 0.07 } })).toThrow(
      /billing\/Refund.*ErrorBudgetFastBurn could never fire/,
    );
    expect(() => sloRuleGroups(services, { "billing/Refund": { errorRateBudget: 0.069 } })).not.toThrow();
  });

  it("refuses an override naming no unary method, so a typo cannot silently keep the old number", () => {
    expect(() => sloRuleGroups(services, { "kb-search/Serch": { p95TargetMs: 450 } })).toThrow(/kb-search\/Serch/);
    expect(() => sloRuleGroups(services, { "orchestrator/WatchSession": { p95TargetMs: 450 } })).toThrow(
      /WatchSession/,
    );
  });
});

describe("parseSloOverrides", () => {
  it("accepts partial overrides keyed tool/Method", () => {
    expect(parseSloOverrides({ "kb-search/Search": { p95TargetMs: 450 } })).toEqual({
      "kb-search/Search": { p95TargetMs: 450 },
    });
  });

  it.each([
    [[], /object keyed/],
    [{ Search: { p95TargetMs: 1 } }, /not "tool\/Method"/],
    [{ "kb-search/Search": { p95TargetMS: 1 } }, /unknown fields p95TargetMS/],
    [{ "kb-search/Search": { p95TargetMs: 0 } }, /positive integer/],
    [{ "kb-search/Search": { p95TargetMs: "300" } }, /positive integer/],
    [{ "kb-search/Search": { errorRateBudget: 1 } }, /between 0 and 1/],
  ])("rejects %j", (document, message) => {
    expect(() => parseSloOverrides(document)).toThrow(message);
  });
});

describe("toYaml", () => {
  it("quotes what a YAML 1.1 reader (Prometheus, Kubernetes) would read as something other than the string", () => {
    expect(toYaml({ a: "kb-search", b: "5m", c: "yes", d: "on", e: "12:30", f: "10001", g: 0.005, h: [] })).toBe(
      'a: kb-search\nb: 5m\nc: "yes"\nd: "on"\ne: "12:30"\nf: "10001"\ng: 0.005\nh: []\n',
    );
  });

  it("writes the header as comments and multi-line strings as literal blocks that read back unchanged", () => {
    const value = { groups: [{ name: "g", rules: [{ expr: "a\n/\nb" }] }] };
    const text = toYaml(value, ["header"]);
    expect(text).toBe(
      "# header\ngroups:\n  - name: g\n    rules:\n      - expr: |-\n          a\n          /\n          b\n",
    );
    expect(parseYamlDocuments(text, "test")).toEqual([value]);
  });
});

describe("smoke checks and the error budget", () => {
  it("no tool's smoke check expects an answer that spends the error budget: the gates would read a good version as failing", () => {
    for (const service of toolServicesOf(contractFiles)) {
      const call = smokeCallOf(service);
      expect(SERVER_FAULT_CODES as readonly string[], call.tool).not.toContain(status[call.expectCode]);
    }
  });
});
