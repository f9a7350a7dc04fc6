// The next call of a stored decision: planned, then observed in place, stopped on, parked, sent
// to a human or started; a start that lost a race for the amounts other sessions hold plans again.
import { newApproval } from "../guard/approvals.js";
import { statedIn } from "../guard/confidence.js";
import { refusal } from "../guard/side-effect-guard.js";
import { ReservationRefusedError } from "../store/effect-reservations.js";
import type { SessionRecord } from "../store/session-store.js";
import { type CallPlan, planCall } from "./call-pipeline.js";
import { deadlineOf } from "../guard/budget.js";
import { alreadyDone, contextJson, type Pending, pendingJson } from "./data.js";
import type { Kit } from "./kit.js";
import { observeInPlace } from "./observe.js";
import { giveUp, park } from "./park.js";
import { startCall } from "./start-call.js";

/** Reserves refused by a race in a row before the policy hears the call was not made (see #raced). */
const MAX_RESERVATION_RACES = 5;

export class NextCall {
  /** Races per session and call, while they last; in memory only: a restart simply plans again. */
  readonly #races = new Map<string, number>();

  constructor(private readonly kit: Kit) {}

  async take(
    s: SessionRecord,
    call: Pending["queue"][number],
    pending: Pending,
    signal: AbortSignal,
  ): Promise<SessionRecord> {
    const { deps, moves } = this.kit;
    const rest = pending.queue.slice(1);
    // Refused calls spend no budget but a money call's live reads (checked against it before reading),
    // so the wall clock is the one that must stop a long queue of them.
    if (deps.now() >= deadlineOf(s.usage, s.budget)) {
      return moves.stop(
        s,
        "deadline",
        `deadline reached with ${pending.queue.length} call(s) the policy asked for not made${alreadyDone(s, deps.registry)}`,
      );
    }
    const plan = await planCall(this.kit, s, call, statedIn(call) ?? statedIn(pending));
    switch (plan.kind) {
      case "observe":
        return observeInPlace(this.kit, s, call, rest, plan.envelope, plan.reason);
      case "stop":
        return moves.stop(s, plan.reason, `${plan.answer}${alreadyDone(s, deps.registry)}`);
      case "park":
        return park(this.kit, s, pending, plan) ?? giveUp(this.kit, s, plan, pending);
      case "approve": {
        // An approval expires when the session's wall clock could no longer cover the call after it.
        const until = deadlineOf(s.usage, s.budget) - plan.tool.timeoutMs;
        if (until <= deps.now())
          return moves.stop(
            s,
            "deadline",
            `${plan.tool.name} needs an approval (${plan.why}), and the session's wall clock left cannot cover its call after one: nothing was executed${alreadyDone(s, deps.registry)}`,
          );
        const approval = newApproval(
          plan.tool.name,
          plan.call.argsHash,
          plan.call.worldVersion,
          plan.why,
          deps.now(),
          deps.approvals,
          undefined,
          until,
        );
        return moves.move(s, "AWAITING_APPROVAL", {
          audit: { reason: `approval needed: ${plan.why}`, tool: plan.tool.name, argsHash: plan.call.argsHash },
          patch: {
            context: contextJson(plan.context),
            pending: pendingJson({ queue: rest, call: plan.call, approval }),
          },
        });
      }
      case "start":
        return startCall(this.kit, s, { ...plan, rest }, signal).then(
          (started) => {
            this.#races.delete(`${s.id}\n${plan.call.id}`);
            return started;
          },
          (error: unknown) => this.#raced(s, plan, rest, error),
        );
    }
  }

  /**
   * The reserve, made atomically with the call's record, found totals that other sessions changed
   * since the plan read them: the call is planned again from the new totals (and then usually
   * waits for a human). After a few such races in a row the policy hears EPRECOND (retryable).
   */
  async #raced(
    s: SessionRecord,
    plan: Extract<CallPlan, { kind: "start" }>,
    rest: Pending["queue"],
    error: unknown,
  ): Promise<SessionRecord> {
    if (!(error instanceof ReservationRefusedError)) throw error;
    const raceKey = `${s.id}\n${plan.call.id}`;
    const races = (this.#races.get(raceKey) ?? 0) + 1;
    if (races < MAX_RESERVATION_RACES) {
      this.#races.set(raceKey, races);
      return s;
    }
    this.#races.delete(raceKey);
    const totals = Object.entries(error.totals)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    const message = `${plan.tool.name} was not made: the amounts other sessions hold kept changing while the host decided (${races} times; last totals with this call: ${totals})`;
    const envelope = refusal({ message, suggestedAction: "try again shortly", retryable: true }, this.kit.deps.now());
    const request = { id: plan.call.id, name: plan.tool.name, arguments: plan.call.arguments };
    return observeInPlace(this.kit, s, request, rest, envelope, "amounts kept changing");
  }
}
