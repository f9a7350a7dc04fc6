import type { ServiceSpec } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { storePoolSizes } from "./postgres-budget.js";

const spec = (name: string, kind: "orchestrator" | "tool") =>
  ({ name, kind, stateful: true }) as unknown as ServiceSpec;

describe("storePoolSizes", () => {
  it("gives each stateful tool 3 connections and the orchestrator what max_connections leaves at the peak", () => {
    // 200 − 3 reserved − 10 headroom − 16 Pooler − 2 × 21 tool pods × 3 − 7 LISTEN = 38 over 7 orchestrator pods.
    expect(
      storePoolSizes([spec("orchestrator", "orchestrator"), spec("billing", "tool"), spec("risk", "tool")]),
    ).toEqual({ orchestrator: 5, billing: 3, risk: 3 });
  });

  it("stops when another stateful tool would leave the orchestrator less than 2 connections per pod", () => {
    const four = [
      spec("orchestrator", "orchestrator"),
      spec("billing", "tool"),
      spec("risk", "tool"),
      spec("geo", "tool"),
    ];
    expect(() => storePoolSizes(four)).toThrow(
      /max_connections 200 leaves the orchestrator -5 connections per pod at its peak: raise it or lower the replica bounds/,
    );
  });
});
