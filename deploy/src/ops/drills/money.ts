// What a drill knows of money: the refunds its sessions make are audited against billing's ledger
// (read before the load and after it, for the drill's orders), and the high-risk refunds that wait
// for a human are approved by a second subject while the load runs. The plans refer to this module
// (plan.ts); the runner only calls the SideEffectsCheck it makes.
import { setTimeout as sleep } from "node:timers/promises";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { type OrchestratorApi, retryTransient } from "./orchestrator-api.js";
import type { CheckContext, SideEffectsCheck } from "./side-effects-check.js";
import type { SessionOutcome, SideEffectAudit } from "./report.js";

const REFUND_ID = /rf_[A-Za-z0-9]{16}/g;
const BILLING = "billing";
const BALANCED = { "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) };

export interface LedgerRefund {
  readonly refundId: string;
  readonly orderId: string;
  readonly amountCents: number;
}

/**
 * Refunds are matched by refund id: the ids each session observed (its trace) or cited (its
 * answer), against the refunds billing lists for the drill's orders that were not there before.
 */
export function auditSideEffects(
  sessions: readonly SessionOutcome[],
  before: readonly LedgerRefund[],
  after: readonly LedgerRefund[],
): SideEffectAudit {
  const earlier = new Set(before.map((r) => r.refundId));
  const made = after.filter((r) => !earlier.has(r.refundId));
  const inLedger = new Map<string, number>();
  for (const r of after) inLedger.set(r.refundId, (inLedger.get(r.refundId) ?? 0) + 1);
  const owners = new Map<string, number>();
  const examples: string[] = [];
  let duplicate = 0;
  let lost = 0;
  let reported = 0;
  let doneExactlyOnce = 0;
  for (const s of sessions) {
    const observed = new Set(s.trace?.refundIds ?? []);
    const cited = new Set(s.answer.match(REFUND_ID) ?? []);
    const claimed = new Set([...observed, ...cited]);
    if (observed.size > 0) reported += 1;
    if (observed.size > 1) {
      duplicate += observed.size - 1;
      examples.push(`${s.sessionId} observed ${observed.size} refunds: ${[...observed].join(", ")}`);
    }
    for (const id of claimed) {
      owners.set(id, (owners.get(id) ?? 0) + 1);
      if (!inLedger.has(id)) {
        lost += 1;
        examples.push(`${s.sessionId} reported ${id}, which the ledger does not have`);
      }
    }
    if (s.state === "DONE" && cited.size > 0 && [...cited].every((id) => inLedger.get(id) === 1)) doneExactlyOnce += 1;
  }
  for (const [id, count] of owners) {
    if (count > 1) {
      duplicate += count - 1;
      examples.push(`${id} is claimed by ${count} sessions`);
    }
  }
  const unowned = made.filter((r) => !owners.has(r.refundId));
  for (const r of unowned.slice(0, 5))
    examples.push(`${r.refundId} (${r.amountCents} cents of ${r.orderId}) is in the ledger, but no session owns it`);
  return {
    method:
      "refund ids: observed in each session's step records (GetTrace) or cited in its answer, against billing ListRefunds of the drill's orders (refunds present before the run left out)",
    refundsInLedger: made.length,
    refundsReported: reported,
    duplicate,
    lost,
    unowned: unowned.length,
    doneRefundsExactlyOnce: doneExactlyOnce,
    examples: examples.slice(0, 10),
  };
}

/**
 * The second subject: looks at the sessions waiting for approval, takes a moment to review each,
 * and approves exactly the approval and arguments hash it was shown. A session that moved on
 * meanwhile answers APPROVAL_MISMATCH and is looked at again next round.
 */
export class Approver {
  #resolved = 0;
  #refused = 0;
  readonly #seen = new Set<string>();

  constructor(
    private readonly api: OrchestratorApi,
    private readonly reviewMs = 200,
  ) {}

  get resolved(): number {
    return this.#resolved;
  }

  get refused(): number {
    return this.#refused;
  }

  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const page = await this.api
        .listSessions({ state: SessionState.AWAITING_APPROVAL, pageSize: 500 }, { deadline: 5000 })
        .catch(() => undefined);
      const waiting = (page?.sessions ?? []).filter(
        (s) => s.pendingApproval && !this.#seen.has(s.pendingApproval.approvalId),
      );
      await Promise.all(
        waiting.map(async (s) => {
          const approval = s.pendingApproval!;
          this.#seen.add(approval.approvalId);
          await sleep(this.reviewMs);
          try {
            await retryTransient(() =>
              this.api.resolveApproval(
                {
                  sessionId: s.sessionId,
                  approvalId: approval.approvalId,
                  argumentsHash: approval.argumentsHash,
                  approve: true,
                  reason: "drill: reviewed",
                },
                { deadline: 5000 },
              ),
            );
            this.#resolved += 1;
          } catch {
            this.#refused += 1;
          }
        }),
      );
      await sleep(250, undefined, { signal }).catch(() => undefined);
    }
  }
}

/** Every refund billing holds for the orders. */
export type LedgerReader = (orders: readonly string[]) => Promise<LedgerRefund[]>;

/**
 * Reads billing's live set when called (a release may have moved it), as the operator: every page
 * of each order's refunds (`pageSize` each, 0 for billing's most), however many earlier game days
 * left on it.
 */
export function billingLedger(ctx: Pick<CheckContext, "serviceApi" | "token">, pageSize = 0): LedgerReader {
  let auditor: Promise<string> | undefined;
  return async (orders) => {
    auditor ??= ctx.token("operator", BILLING, ["billing:read"]);
    const ledger = createRawClient(BillingService, ctx.serviceApi(BILLING), {
      token: await auditor,
      channelOptions: BALANCED,
    });
    const everyPage = async (orderId: string): Promise<LedgerRefund[]> => {
      const refunds: LedgerRefund[] = [];
      let pageToken = "";
      do {
        const page = await retryTransient(() =>
          ledger.listRefunds({ orderId, pageSize, pageToken }, { deadline: 5000 }),
        );
        for (const r of page.refunds)
          refunds.push({ refundId: r.refundId, orderId: r.orderId, amountCents: Number(r.amountCents) });
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      return refunds;
    };
    try {
      return (await Promise.all(orders.map(everyPage))).flat();
    } finally {
      ledger.close();
    }
  };
}

/** The ledger audit and the approver of one run: the SideEffectsCheck every plan uses. */
export async function moneyCheck(ctx: CheckContext): Promise<SideEffectsCheck> {
  const readLedger = billingLedger(ctx);
  const approver = new Approver(await ctx.orchestratorAs("approver", ["sessions:read", "approvals:write"]));
  const orders = [...new Set(ctx.sessions.flatMap((p) => (p.orderId ? [p.orderId] : [])))];
  let before: LedgerRefund[] = [];
  return {
    async begin() {
      before = await readLedger(orders);
    },
    during: (signal) => approver.run(signal),
    end: async (outcomes) => auditSideEffects(outcomes, before, await readLedger(orders)),
    get approvalsResolved() {
      return approver.resolved;
    },
  };
}
