#!/usr/bin/env node
// `pnpm patrol`: runs the golden set (test/golden/tasks.jsonl) end to end against a running suite
// and tells whether the agent still does what it should. Each task is a session started as the
// local requester; an approval it waits for is answered as the approver (another person: nobody
// approves their own request); its end is awaited on WatchSession, never polled. The run is judged
// by the sessions' outcome against each task's expectation, recorded in the orchestrator as the
// operator (patrol:report), and compared with the run before. Without --live every task runs dry
// (the task's dry_run: validated and checked against the ledger, nothing committed; a task line
// setting "dry_run": false is refused as bad usage), so a patrol against production moves no money
// and its expectations hold on every run.
// A task the orchestrator stops answering part way (UNAVAILABLE, DEADLINE_EXCEEDED) is a failed task
// of a run that is still recorded; the patrol then exits 1 with one line saying so.
// Exit codes: 0 at or above the threshold, 1 under it (or a task cut off, or the suite unreachable), 2 bad usage.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  OrchestratorService,
  type PatrolRunSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, CLI_FLAGS, createRawClient, numberOption, requiredScopesOf, status } from "@loopguard/tool-sdk";
import { DEFAULT_TOOL_SERVICES } from "../tool-registry.js";
import { approvalWaits } from "./approval-waits.js";
import { actingPerson, apiToken, UsageError } from "./identity.js";
import { type Approval, BUDGET_KEYS, type GoldenTask, parseGoldenSet, sessionTask } from "./patrol-tasks.js";
import { judge, printReport, type TaskResult } from "./patrol-report.js";

const USAGE = `usage: pnpm patrol [--orchestrator HOST:PORT] [--tasks FILE] [--threshold 0..1] [--concurrency N] [--live] [--json]
  runs every task of the golden set as a session, answers approvals as the approver, prints the success rate
  by outcome, stop reasons, p95 latency and cost, records the run in the orchestrator and compares it with the last
  --orchestrator  the API (ORCHESTRATOR_ADDR, default 127.0.0.1:50051)
  --tasks         the golden set (default test/golden/tasks.jsonl)
  --threshold     the success ratio under which it exits 1 (default 0.95)
  --concurrency   sessions at once (default 4; tasks of one lane never run together)
  --live          let money tasks commit (default: every task runs dry, moving no money; a task line
                  with "dry_run": false is refused without it)
people: the keys of requester (starts), approver (answers approvals) and operator (records the run), as --as in loopguard`;

type Api = ReturnType<typeof createRawClient<typeof OrchestratorService>>;

interface Clients {
  readonly requester: Api;
  readonly approver: Api;
}

/** One task, start to end: its result as the report judges it. */
async function runTask(clients: Clients, t: GoldenTask, runId: string, dryRun: boolean): Promise<TaskResult> {
  const started = Date.now();
  const budget = Object.fromEntries(
    Object.entries(t.budget).map(([k, v]) => {
      const { field, most } = BUDGET_KEYS[k]!;
      return [field, most > 2 ** 32 ? BigInt(v) : v];
    }),
  );
  let sessionId = "";
  try {
    const { session } = await clients.requester.startSession(
      {
        goal: t.goal,
        task: sessionTask(t, !dryRun) as never,
        budget,
        scopes: [...(t.scopes ?? requiredScopesOf(DEFAULT_TOOL_SERVICES))],
        policy: t.policy,
        idempotencyKey: t.idempotencyKey ?? `patrol-${runId}-${t.id}`,
      },
      { deadline: 10_000 },
    );
    let approval: Approval = "none";
    const id = session!.sessionId;
    sessionId = id;
    for await (const _ of approvalWaits(clients.requester.watchSession({ sessionId: id }))) {
      const { session: s } = await clients.approver.getSession({ sessionId: id }, { deadline: 5000 });
      const pending = s?.pendingApproval;
      if (!pending) continue;
      // A task that expects no approval is denied: the patrol never lets through what it did not expect to be asked.
      const approve = !("error" in t.expect) && t.expect.approval === "approve";
      approval = approve ? "approve" : "deny";
      await clients.approver.resolveApproval(
        {
          sessionId: id,
          approvalId: pending.approvalId,
          argumentsHash: pending.argumentsHash,
          approve,
          reason: `patrol ${runId}: task ${t.id}`,
        },
        { deadline: 5000 },
      );
    }
    const { session: end } = await clients.requester.getSession({ sessionId: id }, { deadline: 5000 });
    return {
      task: t,
      sessionId: id,
      latencyMs: Date.now() - started,
      outcome: end?.outcome?.kind ?? "",
      outcomeReason: end?.outcome?.reason ?? "",
      stopReason: end?.stopReason ?? "",
      approval,
      costMicros: end?.usage?.costMicros ?? 0n,
    };
  } catch (error) {
    if (!(error instanceof CallError)) throw error;
    if (error.code === status.UNAVAILABLE || error.code === status.DEADLINE_EXCEEDED) {
      const cutOff = {
        code: status[error.code]!,
        message: `${error.reason ? `${error.reason}: ` : ""}${error.message}`,
      };
      return { task: t, sessionId, latencyMs: Date.now() - started, cutOff };
    }
    return {
      task: t,
      sessionId,
      latencyMs: Date.now() - started,
      refused: {
        code: status[error.code] ?? String(error.code),
        fields: error.fieldViolations.map((v) => v.field),
        message: error.message,
      },
    };
  }
}

/** What went wrong with the run itself (not with a task), said in one line. */
class PatrolFailure extends Error {}

function failureText(error: unknown, addr?: string): string {
  if (error instanceof CallError && error.code === status.UNAVAILABLE && !error.reason)
    return `cannot reach the orchestrator${addr ? ` at ${addr}` : ""} (is \`pnpm start\` running?)`;
  return error instanceof Error ? error.message : String(error);
}

/** Runs the tasks, `concurrency` at once, the tasks of one lane in file order one after another. */
async function runAll(
  tasks: readonly GoldenTask[],
  concurrency: number,
  run: (t: GoldenTask) => Promise<TaskResult>,
): Promise<TaskResult[]> {
  const lanes = new Map<string, GoldenTask[]>();
  for (const t of tasks) lanes.set(t.lane, [...(lanes.get(t.lane) ?? []), t]);
  // Longest lanes first, so one long lane does not finish alone at the end.
  const queue = [...lanes.values()].sort((a, b) => b.length - a.length);
  const results = new Map<string, TaskResult>();
  const worker = async (): Promise<void> => {
    for (let lane = queue.shift(); lane; lane = queue.shift()) for (const t of lane) results.set(t.id, await run(t));
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, worker));
  return tasks.map((t) => results.get(t.id)!);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      ...CLI_FLAGS,
      orchestrator: { type: "string" },
      tasks: { type: "string" },
      threshold: { type: "string" },
      concurrency: { type: "string" },
      live: { type: "boolean" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const addr = values.orchestrator ?? process.env.ORCHESTRATOR_ADDR ?? "127.0.0.1:50051";
  if (!/^[\w.-]+:\d+$|^\[[0-9a-fA-F:]+\]:\d+$/.test(addr))
    throw new UsageError(`--orchestrator must be HOST:PORT, got "${addr}"`);
  const threshold = numberOption(values.threshold, "threshold", 0.95, 0, 1, false);
  const concurrency = numberOption(values.concurrency, "concurrency", 4, 1, 64, true);
  const file = values.tasks ?? "test/golden/tasks.jsonl";
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read --tasks ${file}: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
  }
  const dryRun = values.live !== true;
  const tasks = parseGoldenSet(text, file, !dryRun);
  const scopes = requiredScopesOf(DEFAULT_TOOL_SERVICES);
  const requester = actingPerson("requester");
  const approver = actingPerson("approver");
  const operator = actingPerson("operator");
  if (approver.binding.subject === requester.binding.subject)
    throw new UsageError("the approver's key is bound to the requester's subject: nobody approves their own request");
  const clients: Clients = {
    requester: createRawClient(OrchestratorService, addr, {
      token: await apiToken(requester, "start sessions", [
        "sessions:read",
        "sessions:write",
        ...scopes.map((s) => `grant:${s}`),
      ]),
    }),
    approver: createRawClient(OrchestratorService, addr, {
      token: await apiToken(approver, "answer approvals", ["sessions:read", "approvals:write"]),
    }),
  };
  const reporter = createRawClient(OrchestratorService, addr, {
    token: await apiToken(operator, "record patrol runs", ["patrol:report"]),
  });
  const runId = `${Date.now().toString(36)}`;
  const startedAt = Date.now();
  if (!values.json)
    console.log(
      `patrol: ${tasks.length} tasks from ${file} against ${addr}, ${concurrency} at once, ${dryRun ? "dry run (no money moves)" : "LIVE (money tasks commit)"}`,
    );
  try {
    const results = await runAll(tasks, concurrency, (t) => runTask(clients, t, runId, dryRun));
    const verdict = judge(results, threshold);
    const run: MessageInitShape<typeof PatrolRunSchema> = {
      startedAt: timestampFromMs(startedAt),
      finishedAt: timestampFromMs(Date.now()),
      tasks: verdict.tasks,
      passed: verdict.passed,
      successRatio: verdict.passed / verdict.tasks,
      threshold,
      stopReasons: verdict.stopReasons,
      p95LatencyMs: verdict.p95LatencyMs,
      costMicros: verdict.costMicros,
      dryRun,
      mismatches: verdict.mismatches.slice(0, 1000).map((m) => ({
        taskId: m.task.id,
        expected: m.expected.slice(0, 256),
        got: m.got.slice(0, 512),
        sessionId: m.sessionId,
      })),
      tasksSha256: createHash("sha256").update(text).digest("hex"),
    };
    const cutOff = results.flatMap((r) => ("cutOff" in r ? [r] : []));
    // Tasks cut off are failed tasks of a run that is still recorded, so the patrol's gauges and alerts see it.
    const cutText = cutOff[0]
      ? `${cutOff.length} of ${results.length} tasks cut off: the orchestrator answered ${cutOff[0].cutOff.code} (${cutOff[0].task.id}: ${cutOff[0].cutOff.message})`
      : undefined;
    const recorded = await reporter.recordPatrolRun({ run }, { deadline: 5000 }).catch((error: unknown) => {
      if (cutText === undefined) throw error;
      throw new PatrolFailure(`${cutText}; the run could not be recorded: ${failureText(error, addr)}`);
    });
    const previous =
      recorded.previous && recorded.previous.tasksSha256 === run.tasksSha256 ? recorded.previous : undefined;
    printReport(verdict, {
      json: values.json === true,
      runId: recorded.run!.runId,
      previous,
      previousOtherSet: recorded.previous !== undefined && previous === undefined,
    });
    if (verdict.passed / verdict.tasks < threshold) process.exitCode = 1;
    if (cutText !== undefined) throw new PatrolFailure(`${cutText}; the run is recorded with them failed`);
  } finally {
    for (const c of [clients.requester, clients.approver, reporter]) c.close();
  }
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`patrol: ${error.message}\n`);
    process.exit(2);
  }
  // node:util parseArgs: an unknown option, a stray argument, a value given to a flag (--live=1).
  if ((error as { code?: unknown }).code?.toString().startsWith("ERR_PARSE_ARGS")) {
    process.stderr.write(`patrol: ${(error as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  process.stderr.write(`patrol: ${error instanceof PatrolFailure ? error.message : failureText(error)}\n`);
  process.exit(1);
});
