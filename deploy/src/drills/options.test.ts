import { DEFAULT_MAX_SESSIONS_PER_CALLER } from "@loopguard/orchestrator";
import { describe, expect, it } from "vitest";
import { UsageError } from "../cli.js";
import { MAX_SESSIONS, parseDrillArgs } from "./options.js";
import { drillEnv } from "./local.js";
import { planSessions } from "./session-plan.js";
import { podChaosPlan } from "./k8s.js";
import { runnerArgs } from "./k8s-launch.js";

const catalogue = {
  tools: ["kb-search", "billing", "risk"],
  orchestrator: "orchestrator",
  methodsOf: (tool: string) => (tool === "billing" ? ["GetOrder", "Refund", "ListRefunds"] : ["Search"]),
};
const parse = (...args: string[]) => parseDrillArgs(args, catalogue);

describe("parseDrillArgs", () => {
  it("has defaults for everything but the scenario and the tool", () => {
    expect(parse("kill-tool", "--tool", "kb-search")).toMatchObject({
      scenario: "kill-tool",
      tool: "kb-search",
      kill: "all",
      sessions: 200,
      durationS: 10,
      refundShare: 0.5,
      backendLatencyMs: 100,
      replicas: 2,
      tag: "latest",
      json: false,
      k8s: false,
    });
    expect(parse("kill-orchestrator")).toMatchObject({ tool: "orchestrator", kill: "one" });
    expect(parse("errors", "--tool", "billing", "--error-rate", "30", "--method", "Refund")).toMatchObject({
      errorRate: 0.3,
      method: "Refund",
    });
  });

  it.each([
    [[], "name a scenario"],
    [["chaos"], 'unknown scenario "chaos"'],
    [["kill-tool"], "kill-tool needs --tool (kb-search, billing, risk)"],
    [["kill-tool", "--tool", "search"], 'unknown tool "search"'],
    [["kill-tool", "--tool", "kb-search", "--kill", "some"], '--kill takes one or all, got "some"'],
    [["latency", "--tool", "kb-search", "--kill", "one"], "--kill belongs to kill-tool and flap"],
    [["kill-tool", "--tool", "kb-search", "--sessions", "0"], '--sessions takes an integer in 1..1500, got "0"'],
    [["kill-tool", "--tool", "kb-search", "--sessions", "12.5"], '--sessions takes an integer in 1..1500, got "12.5"'],
    [["kill-tool", "--tool", "kb-search", "--replicas", "1"], '--replicas takes an integer in 2..8, got "1"'],
    [
      ["latency", "--tool", "billing", "--method", "Search"],
      'billing has no method "Search" (methods: GetOrder, Refund, ListRefunds)',
    ],
    [["kill-orchestrator", "--tool", "billing"], "kill-orchestrator kills an orchestrator replica"],
    [["release", "--tool", "billing"], "release needs --to"],
    [["kill-tool", "--tool", "kb-search", "--dry-run"], "--dry-run belongs to --k8s"],
    [["latency", "--tool", "kb-search", "--k8s"], "--k8s runs the pod-kill scenarios"],
    [["kill-tool", "--tool", "kb-search", "--tag", ".x"], "--tag must be"],
    [["kill-tool", "--tool", "kb-search", "--tag", "-x"], "Option '--tag' argument is ambiguous"],
    [["kill-tool", "--tool", "kb-search", "--color"], "Unknown option '--color'"],
  ])("refuses %j with one line naming the problem", (args, message) => {
    expect(() => parse(...args)).toThrow(UsageError);
    expect(() => parse(...args)).toThrow(message);
  });
});

describe("planSessions", () => {
  it("interleaves refunds and questions, plans the one high-risk refund on the order whose customer needs an approval, and keeps bulk refunds under 50,000 cents", () => {
    const plan = planSessions(1500, 0.5, "run");
    const refunds = plan.filter((p) => p.kind === "refund");
    expect(refunds).toHaveLength(750);
    expect(plan.slice(0, 4).map((p) => p.kind)).toEqual(["question", "refund", "question", "refund"]);
    const approvals = refunds.filter((p) => p.needsApproval);
    expect(approvals.map((p) => p.orderId)).toEqual(["ord_DEMO00000008"]);
    const bulk = refunds.filter((p) => !p.needsApproval).reduce((sum, p) => sum + Number(p.task.amount_cents), 0);
    expect(bulk).toBeLessThanOrEqual(50_000);
    expect(new Set(plan.map((p) => p.idempotencyKey)).size).toBe(1500);
    expect(planSessions(1000, 1, "run").filter((p) => p.kind === "refund")).toHaveLength(1000);
    expect(planSessions(10, 0, "run").every((p) => p.kind === "question")).toBe(true);
  });
});

describe("--prometheus", () => {
  it("takes an in-cluster URL for a cluster run only, and round-trips through the runner's arguments", () => {
    const options = parse(
      "kill-orchestrator",
      "--k8s",
      "--prometheus",
      "http://prometheus-operated.monitoring.svc:9090/",
    );
    expect(options.prometheus).toBe("http://prometheus-operated.monitoring.svc:9090");
    // The Job gets the options spelled out; the runner parses them back to the same run.
    expect({ ...parseDrillArgs(runnerArgs(options), catalogue), dryRun: false }).toEqual({ ...options, dryRun: false });
    const flap = parse(
      "flap",
      "--tool",
      "risk",
      "--kill",
      "one",
      "--sessions",
      "70",
      "--duration",
      "20",
      "--refund-share",
      "30",
      "--k8s",
    );
    expect(parseDrillArgs(runnerArgs(flap), catalogue)).toEqual(flap);
    expect(() => parse("kill-orchestrator", "--prometheus", "http://p:9090")).toThrow("--prometheus belongs to --k8s");
    expect(() => parse("kill-orchestrator", "--k8s", "--prometheus", "prometheus:9090")).toThrow(UsageError);
  });
});

describe("podChaosPlan", () => {
  it("kills once for kill-tool, once per cycle for a flap, with names a cluster accepts", () => {
    const kill = podChaosPlan(
      parse("kill-tool", "--tool", "kb-search", "--kill", "one"),
      "kill-tool-kb-search-20261201T101010",
    );
    expect(kill).toHaveLength(1);
    expect(kill[0]).toMatchObject({
      metadata: { name: "drill-kill-tool-kb-search-20261201t101010-1" },
      spec: { action: "pod-kill", mode: "one", gracePeriod: 0 },
    });
    expect(kill[0]!.metadata.annotations).toBeUndefined();
    const flap = podChaosPlan(parse("flap", "--tool", "billing", "--duration", "12"), "flap-billing-20261201T101010");
    expect(flap.map((o) => o.metadata.name)).toEqual([1, 2, 3].map((i) => `drill-flap-billing-20261201t101010-${i}`));
    for (const object of [...kill, ...flap]) expect(object.metadata.name.length).toBeLessThanOrEqual(63);
  });
});

describe("the drill's session quota", () => {
  it("lets the drill's one requester have every session in flight: set on the local containers' orchestrators, and within the default a cluster runs with", () => {
    const options = parse("kill-tool", "--tool", "kb-search", "--sessions", "1500");
    expect(drillEnv(options, { kind: "orchestrator" })).toEqual({ ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: "1500" });
    expect(drillEnv(options, { kind: "tool" })).toEqual({});
    expect(MAX_SESSIONS).toBeLessThanOrEqual(DEFAULT_MAX_SESSIONS_PER_CALLER);
  });
});
