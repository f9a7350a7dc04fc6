import { describe, expect, it } from "vitest";
import { moneyCheck } from "./money.js";
import { parseDrillArgs } from "./options.js";
import { FLAP_DOWN_MS, planOf } from "./plan.js";

const catalogue = {
  tools: ["kb-search", "billing", "risk"],
  orchestrator: "orchestrator",
  methodsOf: () => ["Search"],
};
const planFor = (...argv: string[]) => planOf(parseDrillArgs(argv, catalogue), "kb-search");
const kinds = (...argv: string[]) => planFor(...argv).steps.map((s) => s.do);

describe("planOf", () => {
  it("kills every pod of a tool before the load starts, and restores them after the fault", () => {
    expect(kinds("kill-tool", "--tool", "billing")).toEqual(["kill", "start-load", "hold", "restore"]);
  });

  it("kills one pod once the tool's calls are under way, and notes there is no dead window", () => {
    expect(kinds("kill-tool", "--tool", "billing", "--kill", "one")).toEqual([
      "start-load",
      "trigger",
      "kill",
      "start-load",
      "hold",
      "restore",
      "note",
    ]);
  });

  it("flaps by repeating a kill window and an up time capped by the flap's end", () => {
    const [repeat] = planFor("flap", "--tool", "billing", "--duration", "20").steps;
    expect(repeat).toMatchObject({ do: "repeat", forMs: 20_000 });
    expect(repeat?.do === "repeat" && repeat.steps).toEqual([
      { do: "kill", pods: "all" },
      { do: "start-load" },
      { do: "hold", ms: FLAP_DOWN_MS },
      { do: "restore" },
      { do: "hold", ms: 3000, capped: true },
    ]);
  });

  it("kills an orchestrator replica once a tenth of the sessions ended, counting the first tool's calls", () => {
    const plan = planFor("kill-orchestrator");
    expect(plan.steps).toEqual([
      { do: "start-load", wait: true },
      { do: "trigger", on: "sessions-ended" },
      { do: "kill", pods: "one", restored: false },
    ]);
    expect(plan.target).toEqual({ service: "orchestrator", grpcService: expect.stringContaining("KbSearch") });
  });

  it("sets twice the method's p95 target as latency, then the baseline again", () => {
    const steps = planFor("latency", "--tool", "kb-search", "--backend-latency", "40").steps;
    expect(steps.map((s) => s.do)).toEqual(["start-load", "trigger", "set-faults", "hold", "set-faults"]);
    expect(steps[2]).toMatchObject({ profile: { methods: ["Search"] } });
    expect(steps[4]).toEqual({ do: "set-faults", profile: { addedLatencyMs: 40 }, what: "faults cleared" });
  });

  it("fails a share of calls on top of the backend latency", () => {
    const steps = planFor("errors", "--tool", "kb-search", "--error-rate", "30").steps;
    expect(steps[2]).toMatchObject({ profile: { addedLatencyMs: 100, errorRate: 0.3, methods: [] } });
  });

  it("releases and rolls back under a steady load whose bound spans the release", () => {
    const plan = planFor("release", "--tool", "billing", "--to", "v2", "--duration", "90");
    expect(plan.pace).toBe("steady");
    expect(plan.boundMs).toBe(90_000 + 60_000 + 30_000);
    expect(plan.steps.filter((s) => s.do === "release")).toMatchObject([
      { kind: "release", to: "v2" },
      { kind: "rollback" },
    ]);
  });

  it("audits money with every plan, and budgets a burst's sessions past the fault", () => {
    const plan = planFor("kill-tool", "--tool", "risk", "--duration", "10");
    expect(plan.sideEffects).toBe(moneyCheck);
    expect(plan.budgetMs).toBe(70_000);
  });
});
