import { describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../guard/budget.js";
import type { Usage } from "../store/session-store.js";
import { type RegisteredTool, ToolRegistry } from "../tool-registry.js";
import type { SessionContext } from "./data.js";
import { argsHash, type CheckInput, checkCall, idempotencyKeyOf, safeToReissue } from "./plan.js";

const registry = new ToolRegistry();
const NOW = Date.UTC(2026, 0, 1);
const FRESH: Usage = { steps: 1, toolCalls: 0, tokens: 0, costMicros: 0, startedAt: NOW };
const CONTEXT: SessionContext = { history: [], fingerprints: [], traceId: "0".repeat(32), traceSteps: 0 };
const REFUND = JSON.stringify({ orderId: "ord_DEMO00000001", amountCents: 600, reason: "REFUND_REASON_DAMAGED" });

function tool(name: string): RegisteredTool {
  const found = registry.get(name);
  if (!found) throw new Error(`no tool ${name}`);
  return found;
}

const CUSTOMER = { id_card: "110101198003121232", phone: "+8613800138000" };

function check(name: string, args: string, over: Partial<CheckInput["session"]> = {}, argumentsBytes?: number) {
  return checkCall({
    session: {
      id: "ses_1",
      scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
      usage: FRESH,
      budget: DEFAULT_BUDGET,
      task: { kind: "refund", ...CUSTOMER },
      ...over,
    },
    context: CONTEXT,
    call: { id: "c1", name, arguments: args, ...(argumentsBytes === undefined ? {} : { argumentsBytes }) },
    registry,
    now: NOW,
  });
}

describe("checkCall", () => {
  it("an unknown tool is an ENOTOOL observation naming the tools the session may use", () => {
    const plan = check("billing_refund_all", "{}");
    expect(plan).toMatchObject({
      kind: "observe",
      reason: "unknown tool",
      envelope: { ok: false, error: { code: "ENOTOOL" } },
    });
    expect(plan.kind === "observe" && plan.envelope.error?.suggestedAction).toContain("billing_refund");
  });

  it("invalid arguments are an EINVAL observation, not a call", () => {
    expect(check("billing_refund", JSON.stringify({ orderId: "ord_DEMO00000001", amountCents: -1 }))).toMatchObject({
      kind: "observe",
      reason: "invalid arguments",
      envelope: { error: { code: "EINVAL" } },
    });
  });

  it("a tool outside the session's scopes stops it with permission_denied", () => {
    expect(check("billing_refund", REFUND, { scopes: ["billing:read"] })).toMatchObject({
      kind: "stop",
      reason: "permission_denied",
    });
  });

  it("a call past the tool-call budget stops the session before it is made", () => {
    expect(
      check("kb_search_search", JSON.stringify({ query: "refunds", limit: 3 }), {
        usage: { ...FRESH, toolCalls: DEFAULT_BUDGET.maxToolCalls },
      }),
    ).toMatchObject({
      kind: "stop",
      reason: "max_tool_calls",
    });
  });

  it("a task run dry makes every refund a dry run: the host sets dry_run from the task, and the model can neither set nor clear it", () => {
    const dry = check("billing_refund", REFUND, { task: { kind: "refund", ...CUSTOMER, dry_run: true } });
    if (dry.kind !== "checked") throw new Error(`expected a checked call, got ${dry.kind}`);
    expect(dry.args.dryRun).toBe(true);
    expect(JSON.parse(dry.call.arguments)).toMatchObject({ dryRun: true });
    const live = check("billing_refund", REFUND);
    if (live.kind !== "checked") throw new Error(`expected a checked call, got ${live.kind}`);
    expect(live.args).not.toHaveProperty("dryRun");
    expect(tool("billing_refund").spec.parameters).not.toHaveProperty("properties.dryRun");
    const turnedOff = check("billing_refund", JSON.stringify({ ...JSON.parse(REFUND), dryRun: false }), {
      task: { kind: "refund", ...CUSTOMER, dry_run: true },
    });
    expect(turnedOff).toMatchObject({
      kind: "observe",
      reason: "invalid arguments",
      envelope: { error: { code: "EINVAL" } },
    });
    expect(turnedOff.kind === "observe" && turnedOff.envelope.error?.message).toContain("dryRun: is set by the host");
  });

  it("a valid call gets its key, its hash over the canonical arguments, and a redacted call in the history", () => {
    const plan = check("billing_refund", REFUND);
    if (plan.kind !== "checked") throw new Error(`expected a checked call, got ${plan.kind}`);
    const { idempotencyKey, ...rest } = JSON.parse(plan.call.arguments) as Record<string, string | number>;
    expect(rest).toMatchObject({ orderId: "ord_DEMO00000001" });
    expect(idempotencyKey).toBe(idempotencyKeyOf("ses_1", tool("billing_refund"), rest));
    expect(plan.call).toMatchObject({
      id: "c1",
      tool: "billing_refund",
      argsHash: argsHash("billing_refund", plan.call.arguments),
      worldVersion: "",
    });
    expect(plan.context.history).toEqual([
      { kind: "call", callId: "c1", tool: "billing_refund", arguments: expect.any(String) },
    ]);
    expect(CONTEXT.history).toEqual([]);
  });

  it("arguments larger than the tool accepts are an EINVAL quoting only their redacted beginning", () => {
    const plan = check("kb_search_search", '{"query":"call 13800138000 about', {}, 5_000_000);
    expect(plan).toMatchObject({
      kind: "observe",
      reason: "arguments too large",
      envelope: { error: { code: "EINVAL" } },
    });
    expect(plan.kind === "observe" && plan.envelope.error?.message).toBe(
      'arguments for kb_search_search are 5000000 bytes; it accepts at most 16384. They began: {"query":"call [redacted] about…',
    );
  });

  it("sends the task's personal data where the model wrote placeholders, and keeps the placeholders in the history", () => {
    const plan = check("risk_query_risk", JSON.stringify({ idCard: "{{task.id_card}}", phone: "{{task.phone}}" }));
    if (plan.kind !== "checked") throw new Error(`expected a checked call, got ${plan.kind}`);
    expect(JSON.parse(plan.call.arguments)).toEqual({ idCard: CUSTOMER.id_card, phone: CUSTOMER.phone });
    expect(plan.call.argsHash).toBe(argsHash("risk_query_risk", plan.call.arguments));
    expect(plan.context.history[0]).toMatchObject({
      arguments: JSON.stringify({ idCard: "{{task.id_card}}", phone: "{{task.phone}}" }),
    });
  });

  it("another person's id card is an EPRECOND observation naming the bound, not a call", () => {
    const plan = check("risk_query_risk", JSON.stringify({ idCard: "11010519491231002X", phone: "{{task.phone}}" }));
    expect(plan).toMatchObject({ kind: "observe", envelope: { ok: false, error: { code: "EPRECOND" } } });
    expect(plan.kind === "observe" && plan.envelope.error?.message).toBe(
      "risk_query_risk.idCard must be the task's id_card ({{task.id_card}}); the host reads personal data only for the people the task names",
    );
  });
});

describe("idempotencyKeyOf", () => {
  const refund = tool("billing_refund");

  it("is the same for the same intended effect, whatever key the arguments already carry", () => {
    const args = { orderId: "ord_1", amountCents: 600 };
    expect(idempotencyKeyOf("ses_1", refund, { ...args, idempotencyKey: "from-the-model" })).toBe(
      idempotencyKeyOf("ses_1", refund, args),
    );
  });

  it("differs by session and by arguments", () => {
    const key = idempotencyKeyOf("ses_1", refund, { orderId: "ord_1", amountCents: 600 });
    expect(idempotencyKeyOf("ses_2", refund, { orderId: "ord_1", amountCents: 600 })).not.toBe(key);
    expect(idempotencyKeyOf("ses_1", refund, { orderId: "ord_1", amountCents: 601 })).not.toBe(key);
  });
});

describe("safeToReissue", () => {
  const call = (arguments_: string) => ({
    id: "c1",
    tool: "x",
    arguments: arguments_,
    argsHash: "h",
    worldVersion: "",
  });

  it("a read is always sent again", () => {
    expect(safeToReissue(tool("kb_search_search"), call("{}"))).toBe(true);
  });

  it("an irreversible call only with its idempotency key", () => {
    expect(
      safeToReissue(tool("billing_refund"), call(JSON.stringify({ orderId: "ord_1", idempotencyKey: "lg-1" }))),
    ).toBe(true);
    expect(safeToReissue(tool("billing_refund"), call(JSON.stringify({ orderId: "ord_1" })))).toBe(false);
  });
});
