// `pnpm start`: the whole suite on one machine, every service its own supervised process on
// loopback, data under .data/ (LOOPGUARD_DATA_DIR, 0700, one suite at a time: supervisor.pid, its
// ports held machine-wide for its lifetime; one it cannot use is refused in one line), the keys (the
// orchestrator's and the local people's: requester, approver, operator) checked on every start and
// the secrets services declare (risk's customer-key pepper) made on first start.
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ConfigError, createLogger, discoverServices } from "@loopguard/tool-sdk";
import { cannotUse, openServiceLogs } from "./data-dir.js";
import { type LivenessProbe, livenessSettings } from "./liveness.js";
import { suiteAddresses, suiteEnvironment } from "./suite-env.js";
import { lockPorts, requireFreePorts } from "./ports.js";
import { lockDataDir, SuiteLockError } from "./suite-lock.js";
import { Supervisor } from "./supervisor.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const dataDir = resolve(process.env.LOOPGUARD_DATA_DIR || join(root, ".data"));
// Each service's JSON log goes to its own file; the console keeps the supervisor's lines.
const logDir = join(dataDir, "logs");
const log = createLogger({ service: "supervisor" });

const specs = discoverServices(join(root, "services"));

/** One line and exit 1, before anything started: another suite here, a port taken, a damaged key file, a data folder it cannot use. */
function refuse(error: unknown): never {
  const line =
    error instanceof SuiteLockError || error instanceof ConfigError ? error.message : cannotUse(error, dataDir);
  if (line === undefined) throw error;
  process.stderr.write(`loopguard: ${line}\n`);
  process.exit(1);
}

const locks: (() => void)[] = [];
const unlock = () => {
  for (const release of locks.splice(0).reverse()) release();
};
// The suite's services reach each other, and its demo the orchestrator, where this suite runs them.
const addresses = suiteAddresses(specs);
for (const [variable, address] of Object.entries(addresses)) {
  const given = process.env[variable];
  if (given !== undefined && given !== address)
    log.warn(`${variable} from the environment (${given}) is not used: this suite's service listens on ${address}`);
}
let environment: ReturnType<typeof suiteEnvironment>;
let output: ReturnType<typeof openServiceLogs>;
let liveness: LivenessProbe;
try {
  liveness = livenessSettings(process.env);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  locks.push(lockDataDir(dataDir));
  mkdirSync(logDir, { recursive: true, mode: 0o700 });
  output = openServiceLogs(
    logDir,
    specs.map((s) => s.name),
    log,
  );
  locks.push(lockPorts(specs));
  environment = suiteEnvironment(dataDir, specs);
  await requireFreePorts(specs);
} catch (error) {
  unlock();
  refuse(error);
}
process.once("exit", unlock);

const supervisor = new Supervisor({ ...environment, log, output, liveness });

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info("stopping the suite", { signal });
    void supervisor.stop().then(() => process.exit(0));
  });
}

try {
  await supervisor.start(specs);
} catch (error) {
  log.error("the suite could not start", { error_message: (error as Error).message });
  // A port in use is the whole story; anything else is told in the service's log.
  const logs = error instanceof SuiteLockError ? "" : `(logs: ${logDir})\n`;
  process.stderr.write(`loopguard: ${(error as Error).message}\n${logs}`);
  await supervisor.stop();
  process.exit(1);
}
const rows = specs.map(
  (s) =>
    `  ${s.name.padEnd(13)} grpc 127.0.0.1:${s.port}   http://127.0.0.1:${s.metricsPort}/metrics   log ${join(logDir, `${s.name}.log`)}`,
);
process.stdout.write(["", `loopguard is up (data in ${dataDir}):`, ...rows, ""].join("\n"));

/** The main job, shown once: a refund session run through the CLI, with live progress. */
function runDemo(): Promise<number> {
  const cli = join(root, "services", "orchestrator", "dist", "cli", "loopguard.js");
  const task = join(root, "examples", "refund-task.json");
  process.stdout.write("\nDemo: a refund session (kb-search → billing.GetOrder → risk.QueryRisk → billing.Refund):\n");
  // Run by the local requester: the person who asks for refunds (approvals are another person's, --as approver).
  const child = spawn(
    process.execPath,
    [
      cli,
      "run",
      "Refund 5.00 USD of order ord_DEMO00000001: it arrived damaged",
      "--task-file",
      task,
      "--wait",
      "--as",
      "requester",
    ],
    {
      env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir, ...addresses },
      stdio: ["ignore", "inherit", "inherit"],
    },
  );
  return new Promise((resolveExit) => child.once("exit", (code) => resolveExit(code ?? 1)));
}

if (process.env.LOOPGUARD_DEMO !== "0") await runDemo();
// A stop during the demo ends it: the suite is stopping, not running on.
if (!stopping)
  process.stdout.write(
    [
      "",
      "Where to look next:",
      "  pnpm loopguard dashboard --as approver         the live dashboard's address (with a fresh token of that person)",
      "  pnpm loopguard sessions                        sessions and their state",
      "  pnpm loopguard trace <session id>               the step-by-step JSONL trace",
      '  pnpm loopguard run "Refund order ord_DEMO00000008" --task-file examples/high-risk-refund-task.json --wait',
      "                                                  a high-risk refund that waits for `pnpm loopguard approve <id> --as approver`",
      "  curl -s http://127.0.0.1:8080/metrics           orchestrator metrics (tools: ports 9461-9463)",
      "  TOKEN=$(pnpm -s mint-token --as operator --scope kb:read)   call a tool yourself through server reflection:",
      '  pnpm -s buf curl --protocol grpc --http2-prior-knowledge -H "authorization: Bearer $TOKEN" \\',
      '    -d \'{"query":"refund","limit":3}\' http://127.0.0.1:50061/loopguard.kb.v1.KbSearchService/Search',
      "The suite keeps running; stop it with Ctrl-C.",
      "",
    ].join("\n"),
  );
