#!/usr/bin/env node
// `pnpm settle-effect <session-id> --made|--not-made --reason "…"`: settles by hand the money a
// session still holds for an irreversible call whose outcome it never learnt (it ended with outcome
// reason `effect_unknown: <tool>`, alert SessionEffectsUnknown). The operator checks the tool's own
// records first (billing: ListRefunds of the order, by the call's idempotency key) and says what they
// found; this command does not ask billing itself, it records who said what. Made: the amount counts
// as spent; not made: it is released. One transaction on the session store (ORCHESTRATOR_STORE, as
// the orchestrator's), which a second settle of the same reservation finds settled, writing nothing.
// Exit codes: 0 settled, 1 the store failed, 2 refused (bad usage, unknown session, nothing to settle).
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseStoreUrl, StoreUrlError } from "@loopguard/sql-store";
import { ConfigError, dataDirOf } from "@loopguard/tool-sdk";
import { redactText } from "../guard/redact.js";
import { isTerminal } from "../session/session-state.js";
import { storedOutcome } from "../session/data.js";
import { EFFECT_UNKNOWN } from "../session/outcome.js";
import type { ReservationRecord } from "../store/effect-reservations.js";
import { openSessionStore, storeSetting } from "../store/open-store.js";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import { actingPerson, UsageError } from "./identity.js";

const USAGE = `usage: pnpm settle-effect <session-id> (--made | --not-made) --reason "what the tool's records show" [--key K] [--as NAME]
  settles the amount a session that ended with effect_unknown still holds: --made counts it as spent, --not-made releases it
  --reason  what you found (e.g. "billing ListRefunds ord_X: refund re_Y with this key"), kept with who you are
  --key     the reservation (the call's idempotency key), when the session holds more than one
  --as      the person settling (LOOPGUARD_AS; default operator), whose key must carry sessions:admin
store: ORCHESTRATOR_STORE or the file ORCHESTRATOR_STORE_FILE names (default sqlite:<LOOPGUARD_DATA_DIR>/orchestrator.db), the orchestrator's`;

const MAX_REASON_CHARS = 500;

interface Request {
  readonly sessionId: string;
  readonly made: boolean;
  readonly reason: string;
  readonly key: string | undefined;
  readonly as: string;
}

function readRequest(argv: string[]): Request | undefined {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      help: { type: "boolean", short: "h" },
      made: { type: "boolean" },
      "not-made": { type: "boolean" },
      reason: { type: "string" },
      key: { type: "string" },
      as: { type: "string" },
    },
  });
  if (values.help) return undefined;
  const [sessionId, ...extra] = positionals;
  if (!sessionId) throw new UsageError(`settle-effect needs a session id\n${USAGE}`);
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (values.made === values["not-made"])
    throw new UsageError("say what the tool's records show: exactly one of --made or --not-made");
  const reason = values.reason?.trim() ?? "";
  if (reason === "") throw new UsageError("--reason is required: what you found in the tool's records");
  if (reason.length > MAX_REASON_CHARS) throw new UsageError(`--reason is longer than ${MAX_REASON_CHARS} characters`);
  return {
    sessionId,
    made: values.made === true,
    reason,
    key: values.key,
    as: values.as ?? process.env.LOOPGUARD_AS ?? "operator",
  };
}

/** The session, if it ended with an irreversible call's outcome unknown; else a UsageError saying why not. */
async function endedUnknown(store: SessionStore, id: string): Promise<SessionRecord> {
  const session = await store.get(id);
  if (!session) throw new UsageError(`no session ${id}`);
  if (!isTerminal(session.state))
    throw new UsageError(`session ${id} is ${session.state}, not ended: its own run settles its calls`);
  // A stop clears what is pending and stores what the user got: an irreversible call left unknown is
  // the outcome effect_unknown.
  if (!storedOutcome(session)?.reason.startsWith(EFFECT_UNKNOWN))
    throw new UsageError(
      `session ${id} ended (${session.stopReason}) with no call whose outcome is unknown: it holds nothing to settle by hand`,
    );
  return session;
}

const reservationText = (r: ReservationRecord) =>
  `${r.key} (${r.amount} ${r.currency} minor units on ${r.entity} ${r.entityId})`;

/** The one held reservation to settle (the one `key` names, when given). */
function heldOne(id: string, all: readonly ReservationRecord[], key: string | undefined): ReservationRecord {
  const named = key === undefined ? all : all.filter((r) => r.key === key);
  if (named.length === 0)
    throw new UsageError(`session ${id} ${key === undefined ? "holds no reservation" : `has no reservation ${key}`}`);
  const held = named.filter((r) => r.status === "held");
  if (held.length === 1) return held[0]!;
  if (held.length > 1)
    throw new UsageError(
      `session ${id} holds ${held.length} reservations: name one with --key (${held.map((r) => r.key).join(", ")})`,
    );
  throw new UsageError(`nothing done: ${named.map(settledText).join("; ")}`);
}

function settledText(r: ReservationRecord): string {
  const as = r.status === "settled" ? "made" : "not made";
  return r.settledBy
    ? `${r.key} was settled by hand as ${as} by ${r.settledBy} (${r.settleNote})`
    : `${r.key} was settled as ${as} when the session learnt its outcome`;
}

async function main(): Promise<void> {
  const request = readRequest(process.argv.slice(2));
  if (!request) {
    console.log(USAGE);
    return;
  }
  const person = actingPerson(request.as);
  if (person.scopeBeyond(["sessions:admin"]) !== undefined)
    throw new UsageError(`${person.name} may not settle a reservation: its key does not carry "sessions:admin"`);
  const store = await openStore();
  try {
    const session = await endedUnknown(store, request.sessionId);
    const target = heldOne(session.id, await store.reservations(session.id), request.key);
    const settled = await store.settleHeld({
      sessionId: session.id,
      key: target.key,
      made: request.made,
      by: person.binding.subject,
      // What the operator typed is kept: personal data or a credential pasted from a record is not.
      note: redactText(request.reason),
    });
    // Another settle of the same reservation committed between the read and this one.
    if (!settled) throw new UsageError(`nothing done: ${target.key} was settled meanwhile`);
    console.log(
      `settled ${reservationText(settled)}: ${request.made ? "made, counted as spent" : "not made, released"}, by ${settled.settledBy}`,
    );
  } finally {
    await store.close();
  }
}

async function openStore(): Promise<SessionStore> {
  try {
    const url = storeSetting(process.env, dataDirOf());
    const location = parseStoreUrl(url.value, url.variable);
    // Opening a SQLite file makes it (and its folders): a mistyped path would leave an empty store behind.
    if (location.kind === "sqlite" && !existsSync(location.file))
      throw new UsageError(`no session store at ${location.file} (${url.variable}); nothing done`);
    // Never migrates: the orchestrator's migration step owns the schema; an older one is named.
    return await openSessionStore(url.value, { migrate: false });
  } catch (error) {
    if (error instanceof StoreUrlError || error instanceof ConfigError) throw new UsageError(error.message);
    throw error;
  }
}

main().catch((error: unknown) => {
  const usage =
    error instanceof UsageError || (error as { code?: unknown }).code?.toString().startsWith("ERR_PARSE_ARGS");
  process.stderr.write(`settle-effect: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(usage ? 2 : 1);
});
