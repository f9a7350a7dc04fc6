// What a session's step records (GetTrace) tell the drill: where its tool answers came from, the
// refunds it saw made, and whether two replicas drove it (a step or a final answer recorded twice).
/** What a session's step records (GetTrace) say about it. */
export interface TraceFacts {
  /** Where each tool answer came from: live, cache, degraded (none: the call failed). */
  readonly servedFrom: readonly string[];
  /** Refunds the session observed succeed. */
  readonly refundIds: readonly string[];
  /** Final answers the host accepted (more than one: the session was finished twice). */
  readonly acceptedAnswers: number;
  /** Step numbers recorded more than once (two replicas driving one session). */
  readonly repeatedSteps: number;
  /** Ages of the cached answers the session used. */
  readonly cacheAgesMs: readonly number[];
}

export function traceFacts(records: readonly string[]): TraceFacts {
  const servedFrom: string[] = [];
  const cacheAgesMs: number[] = [];
  const refundIds = new Set<string>();
  const steps = new Map<number, number>();
  let acceptedAnswers = 0;
  for (const line of records) {
    const record = JSON.parse(line) as {
      step?: number;
      decision?: { kind?: string; served_from?: string; accepted?: boolean };
      result?: { ok?: boolean; ageMs?: number; data?: { refund?: { refundId?: string } } } | null;
    };
    if (typeof record.step === "number") steps.set(record.step, (steps.get(record.step) ?? 0) + 1);
    if (record.decision?.kind === "final" && record.decision.accepted === true) acceptedAnswers += 1;
    if (record.decision?.kind === "tool_call" && record.decision.served_from) {
      servedFrom.push(record.decision.served_from);
      if (record.decision.served_from === "cache") cacheAgesMs.push(record.result?.ageMs ?? 0);
      const refundId = record.result?.ok ? record.result.data?.refund?.refundId : undefined;
      if (refundId) refundIds.add(refundId);
    }
  }
  return {
    servedFrom,
    refundIds: [...refundIds],
    acceptedAnswers,
    repeatedSteps: [...steps.values()].filter((n) => n > 1).length,
    cacheAgesMs,
  };
}
