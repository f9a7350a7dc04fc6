import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { SessionMetrics } from "./session-metrics.js";
import { createLogger } from "@loopguard/tool-sdk";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import { sessionHooks } from "../session/hooks.js";
import { reasonLabel } from "../session/outcome.js";
import { STOP_REASONS } from "../session/session-state.js";
import { emptyCounts } from "../store/session-store-support.js";
import { SideEffectRules } from "../guard/side-effects.js";
import { ToolRegistry } from "../tool-registry.js";

describe("SessionMetrics", () => {
  it("asks the store once per scrape for the figures two gauges share, at the time of the store's clock", async () => {
    const asked = { counts: 0, overdue: 0, at: [] as number[] };
    const store = {
      countByState: async () => {
        asked.counts += 1;
        return { ...emptyCounts(), AWAITING_APPROVAL: 3, PARKED: 2 };
      },
      overdue: async (now: number) => {
        asked.overdue += 1;
        asked.at.push(now);
        return { approvals: 1, parkedNearDeadline: 4 };
      },
    } as unknown as SessionStore;
    const registry = new Registry();
    new SessionMetrics(registry).observe(store, () => 1_000_042);
    const page = await registry.metrics();
    expect(page).toMatch(/^loopguard_approvals_waiting 3$/m);
    expect(page).toMatch(/^loopguard_sessions\{state="PARKED"\} 2$/m);
    expect(page).toMatch(/^loopguard_approvals_overdue 1$/m);
    expect(page).toMatch(/^loopguard_sessions_parked_near_deadline 4$/m);
    expect(asked).toEqual({ counts: 1, overdue: 1, at: [1_000_042] });
    await registry.metrics();
    expect(asked).toEqual({ counts: 2, overdue: 2, at: [1_000_042, 1_000_042] });
  });

  it("exports the series the alerts count the first occurrence of at 0 from the start", async () => {
    const registry = new Registry();
    new SessionMetrics(registry);
    const page = await registry.metrics();
    for (const fate of ["charged", "store_failed", "carried", "reissued"])
      expect(page).toMatch(new RegExp(`^loopguard_session_late_spend_total\\{fate="${fate}"\\} 0$`, "m"));
    for (const then of ["stopped", "claimed_back"])
      expect(page).toMatch(new RegExp(`^loopguard_session_leases_lost_total\\{then="${then}"\\} 0$`, "m"));
    expect(page).toMatch(/^loopguard_session_effects_unknown_total 0$/m);
  });

  it("exports every stop reason and the outcomes that name no tool at 0, so the first session ended counts in increase()", async () => {
    const registry = new Registry();
    const metrics = new SessionMetrics(registry);
    const before = await registry.metrics();
    // What a scrape before the first stop holds: SessionStopReasonsHigh needs a 0 sample to see the first 1.
    for (const stop_reason of STOP_REASONS)
      expect(before).toMatch(new RegExp(`^loopguard_session_stops_total\\{stop_reason="${stop_reason}"\\} 0$`, "m"));
    const outcomes = [
      ["succeeded", ""],
      ["not_done", "max_steps"],
      ["not_done", "no_progress"],
      ["not_done", "tool_unavailable"],
      // reasonLabel's, as the hooks count them.
      ["partial", reasonLabel("not_as_asked: billing_refund moved 1")],
      ["partial", reasonLabel("low_confidence: 0.2")],
    ];
    for (const [outcome, reason] of outcomes)
      expect(before).toMatch(
        new RegExp(`^loopguard_session_outcomes_total\\{outcome="${outcome}",reason="${reason}"\\} 0$`, "m"),
      );
    // No series for an outcome that cannot be: a session stopped done is judged by what it made.
    expect(before).not.toMatch(/outcome="not_done",reason="done"/);
    const hooks = sessionHooks(createLogger({ service: "t", write: () => undefined }), metrics);
    hooks.onStopped!({
      id: "ses_t",
      state: "FAILED",
      stopReason: "max_steps",
      usage: { steps: 20 },
      context: { outcome: { kind: "not_done", reason: "max_steps" } },
    } as unknown as SessionRecord);
    const after = await registry.metrics();
    expect(after).toMatch(/^loopguard_session_stops_total\{stop_reason="max_steps"\} 1$/m);
    expect(after).toMatch(/^loopguard_session_outcomes_total\{outcome="not_done",reason="max_steps"\} 1$/m);
  });

  it("exports the outcomes that name one tool and each tool's degraded answers at 0 once it knows the tools", async () => {
    const registry = new Registry();
    const metrics = new SessionMetrics(registry);
    const tools = new ToolRegistry();
    const rules = new SideEffectRules(tools);
    metrics.knowTools(
      tools.list().map((t) => t.name),
      (name) => rules.isIrreversible(name),
    );
    const page = await registry.metrics();
    const at0 = (name: string, labels: string) =>
      expect(page).toMatch(new RegExp(`^${name}\\{${labels.replace(/[{}()]/g, "\\$&")}\\} 0$`, "m"));
    for (const name of ["kb_search_search", "billing_refund", "risk_get_customer_risk"]) {
      at0("loopguard_session_tool_results_total", `tool="${name}",outcome="ok",served_from="degraded"`);
      at0("loopguard_session_outcomes_total", `outcome="partial",reason="degraded: ${name}"`);
      at0("loopguard_session_outcomes_total", `outcome="partial",reason="tool_failed: ${name}"`);
    }
    // What only an irreversible call can leave: its effect not made, or not known.
    at0("loopguard_session_outcomes_total", `outcome="not_done",reason="no_effect: billing_refund"`);
    at0("loopguard_session_outcomes_total", `outcome="not_done",reason="effect_unknown: billing_refund"`);
    expect(page).not.toContain('reason="no_effect: kb_search_search"');
  });

  it("counts a session that ended with its irreversible call's outcome unknown, and warns with its id", async () => {
    const registry = new Registry();
    const metrics = new SessionMetrics(registry);
    const lines: Record<string, unknown>[] = [];
    const hooks = sessionHooks(createLogger({ service: "t", write: (l) => lines.push(JSON.parse(l)) }), metrics);
    const ended = (reason: string) =>
      ({
        id: "ses_t",
        state: "FAILED",
        stopReason: "approval_denied",
        usage: { steps: 1 },
        context: { outcome: { kind: "not_done", reason } },
      }) as unknown as SessionRecord;
    hooks.onStopped!(ended("approval_denied"));
    hooks.onStopped!(ended("effect_unknown: billing_refund"));
    expect(await registry.metrics()).toMatch(/^loopguard_session_effects_unknown_total 1$/m);
    expect(lines.filter((l) => String(l.msg).includes("outcome is unknown")).map((l) => l.session_id)).toEqual([
      "ses_t",
    ]);
  });
});
