// The load of a drill, through the orchestrators' public API as its users drive it: every
// session started at once (each with its own idempotency key, so a start retried after a lost
// answer makes no second session), approvals resolved by a second subject that names the
// approval it saw, and the sessions watched until they end or the run's bound passes.
import { setTimeout as sleep } from "node:timers/promises";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, type RawClient, RETRYABLE_CODES } from "@loopguard/tool-sdk";
import { ExponentialBackoff, handleWhen, retry } from "cockatiel";
import type { PlannedSession } from "./session-plan.js";

/** The scopes every drill session is granted: what the reference tasks need, nothing more. */
export const SESSION_SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"] as const;

const TERMINAL = new Set([SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED]);

/** Retries what a replica dying or being busy answers; anything else is the caller's to see. */
export const retryTransient = retry(
  handleWhen((error) => error instanceof CallError && RETRYABLE_CODES.has(error.code)),
  { maxAttempts: 30, backoff: new ExponentialBackoff({ initialDelay: 50, maxDelay: 1000 }) },
);

export type OrchestratorApi = RawClient<typeof OrchestratorService>;

/**
 * One client over every orchestrator replica (`ipv4:a,b` locally, the headless Service's
 * `dns:///name:port` on a cluster), balanced per call; a replica that dies is skipped once its
 * connection fails.
 */
export function orchestratorApi(target: string, token: string): OrchestratorApi {
  return createRawClient(OrchestratorService, target, {
    token,
    channelOptions: {
      "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }),
      "grpc.initial_reconnect_backoff_ms": 200,
      "grpc.max_reconnect_backoff_ms": 1000,
      // Behind a headless Service, a replacement pod is found by resolving the name again.
      "grpc.dns_min_time_between_resolutions_ms": 2000,
    },
  });
}

export interface SessionView {
  readonly sessionId: string;
  readonly state: string;
  readonly stopReason: string;
  readonly outcome: string;
  readonly outcomeReason: string;
  readonly answer: string;
  readonly createdAtMs: number;
  readonly updatedAtMs: number;
}

function view(s: Session): SessionView {
  return {
    sessionId: s.sessionId,
    state: SessionState[s.state],
    stopReason: s.stopReason,
    outcome: s.outcome?.kind ?? "",
    outcomeReason: s.outcome?.reason ?? "",
    answer: s.answer,
    createdAtMs: s.createdAt ? timestampMs(s.createdAt) : 0,
    updatedAtMs: s.updatedAt ? timestampMs(s.updatedAt) : 0,
  };
}

/** Starts every planned session at once; the session id of each, or undefined when its start never got through. */
export async function startAll(
  api: OrchestratorApi,
  plan: readonly PlannedSession[],
  budgetMs: number,
): Promise<(string | undefined)[]> {
  return Promise.all(
    plan.map(async (p) => {
      try {
        const { session } = await retryTransient.execute(() =>
          api.startSession(
            {
              goal: p.goal,
              task: p.task,
              scopes: [...SESSION_SCOPES],
              policy: "scripted",
              idempotencyKey: p.idempotencyKey,
              budget: { maxWallClockMs: budgetMs },
            },
            { deadline: 10_000 },
          ),
        );
        return session?.sessionId;
      } catch {
        return undefined;
      }
    }),
  );
}

/** Every session in the store, page by page. */
export async function listAll(api: OrchestratorApi, state?: SessionState): Promise<SessionView[]> {
  const out: SessionView[] = [];
  let pageToken = "";
  do {
    const page = await retryTransient.execute(() =>
      api.listSessions({ pageSize: 500, pageToken, ...(state ? { state } : {}) }, { deadline: 5000 }),
    );
    out.push(...page.sessions.map(view));
    pageToken = page.nextPageToken;
  } while (pageToken);
  return out;
}

export function isTerminal(state: string): boolean {
  return TERMINAL.has(SessionState[state as keyof typeof SessionState]);
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
            await retryTransient.execute(() =>
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

/** Each session's step records, a few requests at a time. */
export async function tracesOf(
  api: OrchestratorApi,
  ids: readonly string[],
  concurrency = 16,
): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  const queue = [...ids];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        const trace = await retryTransient
          .execute(() => api.getTrace({ sessionId: id! }, { deadline: 10_000 }))
          .catch(() => undefined);
        if (trace) out.set(id, trace.records);
      }
    }),
  );
  return out;
}
