// `pnpm bench refunds`: what a refund costs through the orchestrator — its money rules included (the
// live reads, the reservation, the bound billing checks, the request-bound credential) — against
// bare GetOrder + Refund calls to the same billing process. kb-search, billing, risk and the
// orchestrator run as real processes; 64 refunds are kept in flight on each side, the two loads
// alternate in rounds, and the CPU each process spent is read from its /metrics. Scripted refund
// sessions (kb search → GetOrder → Refund → answer) refund one cent of ord_DEMO00000002 each.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceProcess } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import { compare, type ProbedFigures as Probed } from "./measure.js";
import { benchPeople } from "./people.js";
import { cpuSeconds, entryOf, sessionEnds, stopAll } from "./processes.js";

const IN_FLIGHT = 64;
const ORDER = "ord_DEMO00000002";
const TASK = { kind: "refund", order_id: ORDER, amount_cents: 1, reason: "DAMAGED" };
const SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];

export async function benchRefunds(durationMs: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-refunds-"));
  const procs: ServiceProcess[] = [];
  const people = benchPeople();
  const tool = async (service: string, prefix: string, env: Record<string, string> = {}) => {
    const proc = await spawnTool(entryOf(service), {
      ...people.env,
      [`${prefix}_PORT`]: "0",
      [`${prefix}_METRICS_PORT`]: "0",
      [`${prefix}_MAX_CONCURRENT`]: "512",
      LOOPGUARD_DATA_DIR: join(dataDir, service),
      ...env,
    });
    procs.push(proc);
    return proc;
  };
  try {
    const kb = await tool("kb-search", "KB_SEARCH");
    const billing = await tool("billing", "BILLING");
    const risk = await tool("risk", "RISK", {
      RISK_CUSTOMER_KEY_PEPPER: "bench-risk-customer-key-pepper-0123456789abcdef",
    });
    const orchestrator = await spawnTool(entryOf("orchestrator"), {
      ...people.orchestratorEnv,
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      LOOPGUARD_DATA_DIR: join(dataDir, "orchestrator"),
      KB_SEARCH_ADDR: kb.address,
      BILLING_ADDR: billing.address,
      RISK_ADDR: risk.address,
      LOG_LEVEL: "info",
    });
    procs.push(orchestrator);
    const endOf = sessionEnds(orchestrator);
    const api = createRawClient(OrchestratorService, orchestrator.address, {
      token: await people.token(
        "requester",
        ["sessions:read", "sessions:write", ...SCOPES.map((s) => `grant:${s}`)],
        "orchestrator",
      ),
    });
    const reader = createRawClient(BillingService, billing.address, {
      token: await people.token("operator", ["billing:read"]),
    });
    const refunder = createRawClient(BillingService, billing.address, {});
    let bareKeys = 0;
    const ended = new Map<string, number>();
    try {
      const [bare, sessions] = (await compare(
        IN_FLIGHT,
        3 * durationMs,
        [
          {
            label: "bare GetOrder + Refund",
            call: async () => {
              await reader.getOrder({ orderId: ORDER });
              // As the orchestrator sends one: a bound, and a token bound to this request (signed here, outside the measured processes).
              const request = {
                orderId: ORDER,
                amountCents: 1n,
                reason: RefundReason.DAMAGED,
                idempotencyKey: `bench-bare-refund-${String(++bareKeys).padStart(8, "0")}`,
                maxRefundedTotalCents: 50_000n,
              };
              await refunder.refund(request, { token: await people.boundToken(BillingService, "Refund", request) });
            },
          },
          {
            label: "orchestrator refund session",
            call: async () => {
              const { session } = await api.startSession({
                goal: "Refund 0.01 of the bulk order",
                task: TASK as never,
                scopes: SCOPES,
                policy: "scripted",
              });
              const end = await endOf(session!.sessionId);
              ended.set(end.state, (ended.get(end.state) ?? 0) + 1);
              if (end.state !== "DONE")
                throw new Error(`a bench refund session ended ${end.state} after ${end.decisions} decisions`);
            },
          },
        ],
        { rounds: 3, warmUpMs: 3000, probe: async () => [await cpuSeconds(orchestrator), await cpuSeconds(billing)] },
      )) as [Probed, Probed];
      console.log(
        "refunds: refund sessions through the orchestrator vs bare GetOrder + Refund to the same billing process (processes, loopback, rounds alternated)",
      );
      const row = (f: Probed) => {
        const cpu = (k: number) => (((f.probed[k] ?? 0) * 1000) / f.calls).toFixed(2);
        return `  ${f.label.padEnd(30)} ${String(f.concurrency).padStart(3)} in flight  ${f.perSecond.toFixed(0).padStart(6)} refunds/s  ratio ${(f.perSecond / bare.perSecond).toFixed(2)}  p50 ${f.p50Ms.toFixed(1)} ms  CPU per refund: orchestrator ${cpu(0)} ms, billing ${cpu(1)} ms`;
      };
      console.log(row(bare));
      console.log(row(sessions));
      console.log(`  sessions ended: ${JSON.stringify(Object.fromEntries(ended))}\n`);
    } finally {
      api.close();
      reader.close();
      refunder.close();
    }
  } finally {
    await stopAll(procs, dataDir);
  }
}
