#!/usr/bin/env node
// `pnpm loopguard …`: the operator's command line for the orchestrator API.
//   run "<goal>" [--task-file F | --task JSON] [--budget k=v…] [--scope s…] [--policy P] [--idempotency-key K] [--wait] [--json]
//   sessions [--state S] [--limit N]   show ID   trace ID   approve ID   deny ID   cancel ID
//   dashboard [--http HOST:PORT]   (the dashboard's address with a fresh token of the person)
// Every command acts as one person (--as NAME, LOOPGUARD_AS; default requester): see identity.ts.
// Every failure: one line on stderr naming the problem, and a non-zero exit code.
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline/promises";
import { parseArgs } from "node:util";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, CLI_FLAGS, createRawClient, type PersonKey, requiredScopesOf, status } from "@loopguard/tool-sdk";
import { DEFAULT_TOOL_SERVICES } from "../tool-registry.js";
import { actingPerson, apiToken, UsageError } from "./identity.js";
import { readBudget, readState, readTask } from "./run-options.js";
import { jsonOf, printable, printSession, reidentified, stateName, summary } from "./session-text.js";

const USAGE = `usage: loopguard <command> [options]
  run "<goal>" [--task-file F | --task JSON] [--budget key=value…] [--scope s…] [--policy scripted|openai] [--idempotency-key K] [--wait] [--json]
      budget keys: steps, tool_calls, tokens, wall_clock_ms, cost_micros, retries; a retried run with the key it printed returns the same session
  sessions [--state STATE] [--limit N]
  show ID        trace ID        cancel ID [--reason R]
  approve ID [--reason R] [--yes]        deny ID [--reason R] [--yes]
      shows the action and asks before deciding (--yes: no question); approve as another person than the one who ran it (--as approver)
  dashboard [--http HOST:PORT]   prints the dashboard URL with a fresh 8-hour token of the person
options: --as NAME (LOOPGUARD_AS, default requester): act as the person whose key is .data/keys/NAME.jwk
         --addr HOST:PORT (ORCHESTRATOR_ADDR, default 127.0.0.1:50051)
         --http HOST:PORT (ORCHESTRATOR_HTTP_ADDR, default 127.0.0.1:8080)`;

/** A new session may call every tool of the contracts unless --scope narrows it. */
const DEFAULT_SCOPES = requiredScopesOf(DEFAULT_TOOL_SERVICES);

let addr = process.env.ORCHESTRATOR_ADDR ?? "127.0.0.1:50051";

function fail(message: string, code = 1): never {
  process.stderr.write(`loopguard: ${message}\n`);
  process.exit(code);
}

function describeCallError(error: CallError): string {
  if (error.code === status.UNAVAILABLE && !error.reason)
    return `cannot reach the orchestrator at ${addr} (is \`pnpm start\` running?)`;
  if (error.code === status.DEADLINE_EXCEEDED) return `the orchestrator at ${addr} did not answer in time`;
  const fields = error.fieldViolations.map((v) => `${v.field}: ${v.description}`).join("; ");
  return `${status[error.code]}${error.reason ? ` ${error.reason}` : ""}: ${fields || error.message}`;
}

const DASHBOARD_TOKEN_TTL_SECONDS = 8 * 3600;

/** What a command's token carries: what it needs, and seeing every session when the person may (sessions:admin). */
function commandScopes(person: PersonKey, needed: readonly string[]): string[] {
  return person.scopeBeyond(["sessions:admin"]) === undefined ? [...needed, "sessions:admin"] : [...needed];
}

/** Asks on the terminal; without one, refuses rather than deciding for the operator. */
async function confirm(question: string): Promise<boolean> {
  if (!process.stdin.isTTY)
    throw new UsageError("approve and deny ask for confirmation: run them in a terminal or pass --yes");
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  try {
    return /^y(es)?$/i.test((await rl.question(question)).trim());
  } finally {
    rl.close();
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      ...CLI_FLAGS,
      addr: { type: "string" },
      task: { type: "string" },
      "task-file": { type: "string" },
      budget: { type: "string", multiple: true },
      scope: { type: "string", multiple: true },
      policy: { type: "string" },
      wait: { type: "boolean" },
      state: { type: "string" },
      limit: { type: "string" },
      yes: { type: "boolean", short: "y" },
      reason: { type: "string" },
      "idempotency-key": { type: "string" },
      http: { type: "string" },
      as: { type: "string" },
    },
  });
  const [command, arg] = positionals;
  if (values.help || !command) {
    console.log(USAGE);
    return;
  }
  addr = values.addr ?? addr;
  const needsId = ["show", "trace", "approve", "deny", "cancel"];
  if (needsId.includes(command) && !arg) throw new UsageError(`${command} needs a session id`);
  if (command === "run" && !arg)
    throw new UsageError('run needs a goal, e.g. loopguard run "Refund order ord_DEMO00000001"');
  if (!["run", "sessions", "dashboard", ...needsId].includes(command))
    throw new UsageError(`unknown command "${command}"\n${USAGE}`);
  const person = actingPerson(values.as);
  if (command === "dashboard") {
    const http = values.http ?? process.env.ORCHESTRATOR_HTTP_ADDR ?? "127.0.0.1:8080";
    if (!/^[\w.-]+:\d+$|^\[[0-9a-fA-F:]+\]:\d+$/.test(http))
      throw new UsageError(`--http must be HOST:PORT, got "${http}"`);
    // The token travels in the URL fragment, which browsers never send to the server or in a Referer.
    // The person's whole binding: the dashboard does what that person may, and no more.
    console.log(
      `http://${http}/#token=${await apiToken(person, "open the dashboard", person.binding.scopes, DASHBOARD_TOKEN_TTL_SECONDS)}`,
    );
    return;
  }
  const sessionScopes = values.scope ?? DEFAULT_SCOPES;
  const credentials =
    command === "run"
      ? // Only the grants the person holds: the orchestrator names any other scope asked for (SCOPE_NOT_GRANTABLE).
        await apiToken(person, "start sessions", [
          "sessions:read",
          "sessions:write",
          ...sessionScopes.map((s) => `grant:${s}`).filter((g) => person.scopeBeyond([g]) === undefined),
        ])
      : command === "approve" || command === "deny"
        ? await apiToken(person, command, commandScopes(person, ["sessions:read", "approvals:write"]))
        : await apiToken(
            person,
            `${command} sessions`,
            commandScopes(person, command === "cancel" ? ["sessions:read", "sessions:write"] : ["sessions:read"]),
          );
  const api = createRawClient(OrchestratorService, addr, { token: credentials });
  const deadline = 10_000;
  try {
    switch (command) {
      case "run": {
        const task = readTask(values);
        // One key per invocation, printed: a run retried with it returns this session instead of starting a second.
        const idempotencyKey = values["idempotency-key"] ?? `run-${randomUUID()}`;
        const { session, created } = await api.startSession(
          {
            goal: arg!,
            task: task as never,
            budget: readBudget(values.budget ?? []),
            scopes: sessionScopes,
            policy: values.policy ?? "scripted",
            idempotencyKey,
          },
          { deadline },
        );
        let last = session!;
        if (!values.json) {
          console.log(
            `${created ? "started" : "already started (same idempotency key):"} ${last.sessionId} (trace ${last.traceId})`,
          );
          console.log(
            `idempotency key ${idempotencyKey}   (retry with --idempotency-key ${idempotencyKey} to get this session back, never a second one)`,
          );
        }
        if (values.wait) {
          for await (const event of api.watchSession({ sessionId: last.sessionId })) {
            if (event.event.case === "snapshot" || event.event.case === "update") last = event.event.value;
            if (values.json) continue;
            if (event.event.case === "transition") {
              const t = event.event.value;
              console.log(printable(`  ${stateName(t.from).padEnd(17)} → ${stateName(t.to).padEnd(17)} ${t.reason}`));
              if (t.to === SessionState.AWAITING_APPROVAL)
                console.log(
                  `  waiting for another person: pnpm loopguard approve ${last.sessionId} --as approver   (or deny)`,
                );
            }
          }
          last = (await api.getSession({ sessionId: last.sessionId }, { deadline })).session!;
        }
        last = reidentified(last, task);
        if (values.json) console.log(JSON.stringify({ ...jsonOf(last), idempotency_key: idempotencyKey }));
        else printSession(last);
        return;
      }
      case "sessions": {
        const state = readState(values.state);
        const limit = values.limit ? Number(values.limit) : 50;
        if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new UsageError("--limit must be 1..500");
        const page = await api.listSessions({ state, pageSize: limit }, { deadline });
        if (values.json) console.log(JSON.stringify(page.sessions.map(jsonOf)));
        else for (const s of page.sessions) console.log(summary(s));
        return;
      }
      case "show": {
        const { session } = await api.getSession({ sessionId: arg! }, { deadline });
        if (values.json) console.log(JSON.stringify(jsonOf(session!)));
        else printSession(session!);
        return;
      }
      case "trace": {
        const { records } = await api.getTrace({ sessionId: arg! }, { deadline });
        for (const record of records) console.log(printable(record));
        return;
      }
      case "cancel": {
        const { session } = await api.cancelSession({ sessionId: arg!, reason: values.reason ?? "" }, { deadline });
        printSession(session!);
        return;
      }
      case "approve":
      case "deny": {
        const { session } = await api.getSession({ sessionId: arg! }, { deadline });
        const approval = session?.pendingApproval;
        if (!approval)
          throw new UsageError(`session ${arg} is not waiting for an approval (state ${stateName(session!.state)})`);
        // What is being decided, shown before it is decided; the decision names exactly this approval.
        console.log(
          printable(
            [
              `session   ${arg}  (started by ${session!.createdBy || "unknown"})`,
              `action    ${approval.tool} ${JSON.stringify(approval.arguments ?? {})}`,
              `why       ${approval.reason}`,
              `approval  ${approval.approvalId}  arguments ${approval.argumentsHash}`,
            ].join("\n"),
          ),
        );
        if (!values.yes && !(await confirm(`${command} this action as ${person.binding.subject}? [y/N] `))) {
          console.log("nothing done");
          return;
        }
        const resolved = await api.resolveApproval(
          {
            sessionId: arg!,
            approvalId: approval.approvalId,
            argumentsHash: approval.argumentsHash,
            approve: command === "approve",
            reason: values.reason ?? "",
          },
          { deadline },
        );
        console.log(
          printable(
            `${command === "approve" ? "approved" : "denied"} ${approval.tool} for ${arg}: now ${stateName(resolved.session!.state)}`,
          ),
        );
        return;
      }
    }
  } finally {
    api.close();
  }
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) fail(error.message, 2);
  if (error instanceof CallError) fail(describeCallError(error));
  // node:util parseArgs: an unknown option, a stray argument, an option without its value.
  if ((error as { code?: unknown }).code?.toString().startsWith("ERR_PARSE_ARGS")) fail((error as Error).message, 2);
  fail(error instanceof Error ? error.message : String(error));
});
