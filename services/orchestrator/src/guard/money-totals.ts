// The host's decision on a money effect's amounts, as a pure function: given what the entity's
// ledger says was moved, what other effects hold or made (from the reservations), the thresholds of
// the entity's currency and the task's own figure, which totals a human must look at, and the
// limits the reservation (and the bound the tool enforces) is then held to. Without a reason the
// limits are the thresholds; with one they are raised to exactly what the approver is shown, so an
// approval covers those figures and nothing more.
import type { AmountThresholds } from "./approvals.js";
import {
  type EffectTotals,
  type OtherEffects,
  type Reservation,
  type ReservationLimits,
  totalsOf,
} from "../store/effect-reservations.js";

export interface MoneyInput {
  readonly reservation: Reservation;
  /** What the entity's ledger says was moved, read live. */
  readonly moved: number;
  readonly others: OtherEffects;
  readonly thresholds: AmountThresholds;
  readonly customerSince: number;
  readonly customerWindowMs: number;
  /** The task field the amount is bound to (TASK_BOUND_AT_MOST), and the task's value there. */
  readonly task: { readonly field: string; readonly figure: number | undefined } | undefined;
}

export interface MoneyDecision {
  readonly totals: EffectTotals;
  /** Why a human must approve; empty when none need to. */
  readonly reasons: string[];
  readonly limits: ReservationLimits;
}

const hours = (ms: number) => (ms % 3600_000 === 0 ? `${ms / 3600_000} h` : `${Math.round(ms / 60_000)} min`);

export function decideMoney(input: MoneyInput): MoneyDecision {
  const { reservation: r, moved, others, thresholds: t, task } = input;
  const totals = totalsOf(r, moved, others);
  const cur = r.currency;
  const reasons: string[] = [];
  if (totals.entity > t.entity) {
    const held = others.entityHeld > 0 ? `, ${others.entityHeld} held by calls in flight` : "";
    reasons.push(
      `${r.entity} ${r.entityId} would have ${totals.entity} ${cur} moved in total (${moved} already, across all sessions${held}), above the approval threshold of ${t.entity} ${cur}`,
    );
  }
  if (r.customerId !== "" && totals.customer > t.customer) {
    reasons.push(
      `customer ${r.customerId} would get ${totals.customer} ${cur} within ${hours(input.customerWindowMs)} across orders and sessions (${others.customer} already), above the per-customer threshold of ${t.customer} ${cur}`,
    );
  }
  if (totals.session > t.session)
    reasons.push(
      `this session would move ${totals.session} ${cur} in total, above the per-session approval threshold of ${t.session} ${cur}`,
    );
  if (task && task.figure === undefined)
    reasons.push(`the task states no ${task.field}, so a human decides the amount (${r.amount} ${cur})`);
  else if (task?.figure !== undefined && totals.task > task.figure) {
    // The task's figure names no currency: what the session moved in another one counts too.
    const elsewhere = totals.task - totals.session;
    const moved =
      elsewhere > 0
        ? `${totals.task} in total, ${elsewhere} of it in other currencies (this call ${r.amount} ${cur})`
        : `${totals.task} ${cur} in total (this call ${r.amount})`;
    reasons.push(`this session would move ${moved}, above the task's ${task.field} of ${task.figure}`);
  }
  const approving = reasons.length > 0;
  const raised = (threshold: number, total: number) => (approving ? Math.max(threshold, total) : threshold);
  const taskMax =
    task === undefined ? undefined : task.figure === undefined ? totals.task : raised(task.figure, totals.task);
  return {
    totals,
    reasons,
    limits: {
      entityMoved: moved,
      entityMax: raised(t.entity, totals.entity),
      // An entity that names no customer keeps no customer total (its risk cannot be read either: a human decides).
      customerMax: r.customerId === "" ? Number.MAX_SAFE_INTEGER : raised(t.customer, totals.customer),
      customerSince: input.customerSince,
      sessionMax: raised(t.session, totals.session),
      taskMax,
    },
  };
}
