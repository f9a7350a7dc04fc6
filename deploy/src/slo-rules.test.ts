import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { methodPolicy, servicePolicy } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { ERROR_RATIO_RECORD, P95_RECORD, parseSloOverrides, pascalCase, type Rule, sloRuleGroups } from "./slo-rules.js";
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
  it("gives every unary method a latency and an error-budget alert at its contract's numbers", () => {
    const byName = alerts();
    for (const service of services) {
      const tool = pascalCase(servicePolicy(service).toolName);
      for (const method of service.methods.filter((m) => m.methodKind === "unary")) {
        const sla = methodPolicy(method).sla!;
        expect(byName.get(`${tool}${method.name}LatencyAboveSlo`)?.expr).toMatch(new RegExp(` > ${sla.p95TargetMs / 1000}$`));
        expect(byName.get(`${tool}${method.name}ErrorBudgetBurn`)?.expr).toMatch(new RegExp(` > ${sla.errorRateBudget}$`));
      }
    }
    expect(byName.get("KbSearchSearchLatencyAboveSlo")).toMatchObject({
      expr: `${P95_RECORD}{grpc_service="loopguard.kb.v1.KbSearchService",grpc_method="Search"} > 0.3`,
      for: "5m",
      labels: { severity: "warning", tool: "kb-search", method: "Search" },
    });
    expect(byName.get("BillingRefundErrorBudgetBurn")).toMatchObject({
      expr: `${ERROR_RATIO_RECORD}{grpc_service="loopguard.billing.v1.BillingService",grpc_method="Refund"} > 0.005`,
      for: "3m",
      labels: { severity: "critical", tool: "billing", method: "Refund" },
    });
  });

  it("skips streaming methods: a stream's duration is its life, not a latency", () => {
    const names = [...alerts().keys()];
    expect(names.some((n) => n.includes("WatchSession"))).toBe(false);
    const orchestrator = sloRuleGroups([OrchestratorService]).groups[0]!;
    for (const rule of orchestrator.rules.filter((r) => "record" in r)) expect(String(rule.expr)).not.toContain("WatchSession");
  });

  it("gives every tool a Down alert on its scrape job", () => {
    expect(alerts().get("RiskDown")).toMatchObject({ expr: 'up{job="risk"} == 0', for: "1m", labels: { severity: "critical", tool: "risk" } });
    expect(sloRuleGroups(services).groups.map((g) => g.name)).toEqual(["loopguard-slo-kb-search", "loopguard-slo-billing", "loopguard-slo-risk", "loopguard-slo-orchestrator"]);
  });

  it("counts only server-fault codes against the error budget", () => {
    const ratio = sloRuleGroups([BillingService]).groups[0]!.rules.find((r) => r.record === ERROR_RATIO_RECORD)!;
    expect(String(ratio.expr)).toContain('grpc_code=~"UNKNOWN|DEADLINE_EXCEEDED|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS"');
    for (const callerCode of ["INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED"]) {
      expect(String(ratio.expr)).not.toContain(callerCode);
    }
  });

  it("applies deploy overrides to the numbers and says so in the description", () => {
    const byName = alerts(sloRuleGroups(services, { "kb-search/Search": { p95TargetMs: 450 }, "billing/Refund": { errorRateBudget: 0.02 } }));
    const latency = byName.get("KbSearchSearchLatencyAboveSlo")!;
    expect(latency.expr).toMatch(/ > 0\.45$/);
    expect((latency.annotations as Record<string, string>).description).toContain("p95 <= 450 ms, timeout 1000 ms (deploy override)");
    expect(byName.get("KbSearchSearchErrorBudgetBurn")!.expr).toMatch(/ > 0\.01$/);
    expect(byName.get("BillingRefundErrorBudgetBurn")!.expr).toMatch(/ > 0\.02$/);
    expect((byName.get("BillingRefundErrorBudgetBurn")!.annotations as Record<string, string>).summary).toContain("2% error budget");
  });

  it("refuses an override naming no unary method, so a typo cannot silently keep the old number", () => {
    expect(() => sloRuleGroups(services, { "kb-search/Serch": { p95TargetMs: 450 } })).toThrow(/kb-search\/Serch/);
    expect(() => sloRuleGroups(services, { "orchestrator/WatchSession": { p95TargetMs: 450 } })).toThrow(/WatchSession/);
  });
});

describe("parseSloOverrides", () => {
  it("accepts partial overrides keyed tool/Method", () => {
    expect(parseSloOverrides({ "kb-search/Search": { p95TargetMs: 450 } })).toEqual({ "kb-search/Search": { p95TargetMs: 450 } });
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
    expect(toYaml({ a: "kb-search", b: "5m", c: "yes", d: "on", e: "12:30", f: "10001", g: 0.005, h: [] })).toBe('a: kb-search\nb: 5m\nc: "yes"\nd: "on"\ne: "12:30"\nf: "10001"\ng: 0.005\nh: []\n');
  });

  it("writes the header as comments and multi-line strings as literal blocks that read back unchanged", () => {
    const value = { groups: [{ name: "g", rules: [{ expr: "a\n/\nb" }] }] };
    const text = toYaml(value, ["header"]);
    expect(text).toBe("# header\ngroups:\n  - name: g\n    rules:\n      - expr: |-\n          a\n          /\n          b\n");
    expect(parseYamlDocuments(text, "test")).toEqual([value]);
  });
});
