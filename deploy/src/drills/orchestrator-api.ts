// The orchestrators' public API as a drill's users call it: sessions started (each with its own
// idempotency key, so a start retried after a lost answer makes no second session), listed and
// traced, every call retried while a replica is dying or busy.
import { setTimeout as sleep } from "node:timers/promises";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  type Backoff,
  backoffDelayMs,
  CallError,
  createRawClient,
  type RawClient,
  RETRYABLE_CODES,
} from "@loopguard/tool-sdk";
import { type PlannedSession, SESSION_SCOPES } from "./session-plan.js";

const TERMINAL = new Set([SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED]);

const TRANSIENT_BACKOFF: Backoff = { baseMs: 50, maxMs: 1000, jitter: "full" };
const TRANSIENT_RETRIES = 30;

/** Retries what a replica dying or being busy answers; anything else is the caller's to see. */
export async function retryTransient<T>(call: () => Promise<T>): Promise<T> {
  for (let retry = 1; ; retry++) {
    try {
      return await call();
    } catch (error) {
      const transient = error instanceof CallError && RETRYABLE_CODES.has(error.code);
      if (!transient || retry > TRANSIENT_RETRIES) throw error;
      await sleep(backoffDelayMs(TRANSIENT_BACKOFF, retry));
    }
  }
}

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

/** Starts one planned session; its session id, or undefined when its start never got through. */
export async function startSession(
  api: OrchestratorApi,
  p: PlannedSession,
  budgetMs: number,
): Promise<string | undefined> {
  try {
    const { session } = await retryTransient(() =>
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
}

/** Every session in the store, page by page. */
export async function listAll(api: OrchestratorApi, state?: SessionState): Promise<SessionView[]> {
  const out: SessionView[] = [];
  let pageToken = "";
  do {
    const page = await retryTransient(() =>
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
        const trace = await retryTransient(() => api.getTrace({ sessionId: id! }, { deadline: 10_000 })).catch(
          () => undefined,
        );
        if (trace) out.set(id, trace.records);
      }
    }),
  );
  return out;
}
