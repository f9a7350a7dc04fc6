// What every part of the runner works with: its dependencies, the one path that moves a session,
// and the session's spans and step records.
import type { DescService } from "@bufbuild/protobuf";
import type { ToolClient } from "@loopguard/tool-sdk";
import type { ApprovalRules } from "../guard/approvals.js";
import type { GuardDeps } from "../guard/side-effect-guard.js";
import type { ContextLimits, Governed } from "../governance/context-governance.js";
import type { PriceTable } from "../policies/model-prices.js";
import type { TokenCounter } from "../policies/model-tokens.js";
import type { Policy, ResultEnvelope, TokenUsage } from "../policies/policy.js";
import type { MoneyChange } from "../store/effect-reservations.js";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import type { SideEffectRules } from "../guard/side-effects.js";
import type { ToolRegistry } from "../tool-registry.js";
import type { ToolTokens } from "../guard/tool-tokens.js";
import type { TraceSink } from "../governance/trace-sink.js";
import type { Pending } from "./data.js";
import type { SessionMoves } from "./moves.js";
import type { SessionSampling } from "./sampling.js";
import type { SessionSpans } from "./spans.js";

export interface RunnerDeps {
  readonly store: SessionStore;
  readonly registry: ToolRegistry;
  /** Clients by the contract's tool name. */
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly policies: ReadonlyMap<string, Policy>;
  readonly traces: TraceSink;
  /** Per-call tool credentials: this session, this method's scope, this call's deadline. */
  readonly tokens: ToolTokens;
  /** The side-effect guards the contracts declare. */
  readonly rules: SideEffectRules;
  readonly approvals: ApprovalRules;
  /** Lease owner (this replica); every transition is fenced by it. */
  readonly owner: string;
  readonly runId: string;
  readonly now: () => number;
  readonly context?: ContextLimits;
  /** Counts prompts as the model receives them; the default encoding's when not given. */
  readonly tokenCounter?: TokenCounter;
  /** Model prices; a model it does not list costs nothing. */
  readonly prices?: PriceTable;
  /** Each prompt as governed before a model call: its size, what compression saved, the 80% alarm. */
  readonly onContext?: (session: SessionRecord, governed: Governed) => void;
  /** Each model call's tokens (reported, or counted) and price. */
  readonly onModelCall?: (model: string, usage: TokenUsage, costMicros: number) => void;
  /** A model call whose reported tokens the host did not believe (prompt.ts believedUsage): what it reported, what was charged. */
  readonly onUsageDisbelieved?: (
    session: SessionRecord,
    model: string,
    reported: TokenUsage,
    charged: TokenUsage,
  ) => void;
  readonly onStep?: (session: SessionRecord, tool: string, envelope: ResultEnvelope) => void;
  /** Takeovers a session may have before it is stopped (takeovers.ts; default 3). */
  readonly maxTakeovers?: number;
  /** Head sampling of session traces (sampling.ts); without it every session's trace is kept. */
  readonly sampling?: SessionSampling;
}

export interface Kit {
  readonly deps: RunnerDeps;
  readonly moves: SessionMoves;
  readonly spans: SessionSpans;
  /**
   * The run of each session this process drives now, by session id: the mark its calls are started
   * under (`pending.startedBy`). A run is one SessionRunner.run: a session run again in this
   * process (after a store outage, or claimed back) finds a call the earlier run started as another
   * run's, so it is re-issued as interrupted, never sent as if for the first time.
   */
  readonly runs: Map<string, string>;
}

/** What the side-effect guards work with: the runner's dependencies, and the charge of their live reads. */
export function guardDepsOf({ deps, moves }: Kit): GuardDeps {
  return { ...deps, charge: (s, spend) => moves.charge(s, spend) };
}

/** The mark of the run now driving session `id` in this process (the process's run id outside a run). */
export function runOf(kit: Kit, id: string): string {
  return kit.runs.get(id) ?? kit.deps.runId;
}

/**
 * `pending.startedBy` of a call a human approved and no run has sent yet: whichever replica drives
 * the session next reads the entity again and records its run on it (one move) before sending it
 * (see approve.ts's sendApproved). A session parked while that read could not be made keeps it.
 */
export const APPROVED = "approved";

/** Letting go of the hold of a call that was not made (one whose earlier attempt's outcome is unknown keeps it). */
export function holdReleased(pending: Pending): MoneyChange | undefined {
  const effect = pending.call?.effect;
  return effect && !pending.unsettled ? { settle: effect.key, outcome: "released" } : undefined;
}
