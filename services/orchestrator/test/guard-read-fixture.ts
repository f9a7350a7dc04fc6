// What the guard read tests share: a model of the test's own, a refund the model asks for, the
// reads the tools say they handled, and a session started with a budget.
import type { Session } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { Decision, Policy, PolicyInput } from "../src/policies/policy.js";
import { ToolRegistry } from "../src/tool-registry.js";
import { ALL_SCOPES, type Suite, type TestOrchestrator, waitForSession } from "./harness.js";

const registry = new ToolRegistry();

/** A tool's price per call, from its contract. */
export const costOf = (tool: string): number => registry.get(tool)!.costMicros;

/** A model of the test's own: each step's decision from `steps`, its calls and answers costing nothing. */
export function scriptedModel(steps: ((input: PolicyInput) => Omit<Decision, "usage" | "promptHash">)[]): Policy {
  return {
    name: "openai",
    async decide(input) {
      return { ...steps[input.step - 1]!(input), usage: { input: 1, output: 1 }, promptHash: "" } as Decision;
    },
  };
}

/** The model's call of billing_refund, `amountCents` of `orderId`. */
export const refund = (id: string, orderId: string, amountCents: number) => ({
  id,
  name: "billing_refund",
  arguments: JSON.stringify({ orderId, amountCents, reason: "REFUND_REASON_DAMAGED" }),
});

/** How many calls (attempts) of `method` the tool has handled, from its own metrics. */
export async function handled(suite: Suite, tool: "billing" | "risk", method: string): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${suite.tools[tool].metricsPort}/metrics`)).text();
  return page
    .split("\n")
    .filter((line) => line.startsWith("grpc_server_handled_total{") && line.includes(`grpc_method="${method}"`))
    .reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
}

/** The host's reads the tools have handled: billing's GetOrder and risk's GetCustomerRisk. */
export const readsOf = async (suite: Suite) => ({
  orders: await handled(suite, "billing", "GetOrder"),
  risks: await handled(suite, "risk", "GetCustomerRisk"),
});

/** Starts a session of the test's model on `task` with `budget`; its id. */
export async function startSession(orch: TestOrchestrator, task: object, budget: object = {}): Promise<string> {
  const { session } = await orch.api.startSession({
    goal: "Refund",
    task: task as never,
    scopes: ALL_SCOPES,
    policy: "openai",
    budget: budget as never,
  });
  return session!.sessionId;
}

/** Starts a session as startSession does, and waits for it to end (or for `until`). */
export async function session(
  orch: TestOrchestrator,
  task: object,
  budget: object = {},
  until?: (s: Session) => boolean,
): Promise<Session> {
  return waitForSession(orch.api, await startSession(orch, task, budget), until);
}
