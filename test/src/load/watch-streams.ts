// Holds WatchSession streams open against an orchestrator, for a load test that measures the
// orchestrator while they are open; its own process, so that handling the streams' messages
// costs the measuring process nothing. Configured by environment:
//   TARGET       host:port of the orchestrator's gRPC API
//   TOKENS       JSON array of bearer tokens; the streams are spread over them (several callers)
//   SESSION_IDS  comma-separated sessions to watch, taken in turn
//   STREAMS      how many streams to open
// Prints one JSON line once every stream has its first message ({"opened":N}), or as soon as one
// fails to open ({"failed":…}, exit 1). On SIGTERM it prints {"closed":…} with what the streams
// received and exits 0: its connections close, as a client's do when it goes away, and the server
// must let go of every stream that was still open.
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    process.stderr.write(`watch-streams: set ${name}\n`);
    process.exit(2);
  }
  return value;
}

const target = required("TARGET");
const tokens = JSON.parse(required("TOKENS")) as string[];
const ids = required("SESSION_IDS").split(",");
const count = Number(required("STREAMS"));

const clients = tokens.map((token) => createRawClient(OrchestratorService, target, { token }));
let opened = 0;
let messages = 0;
let ended = 0;
const errors: Record<string, number> = {};

function report(line: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

async function follow(i: number): Promise<void> {
  const iterator = clients[i % clients.length]!.watchSession({ sessionId: ids[i % ids.length]! })[
    Symbol.asyncIterator
  ]();
  let first = true;
  try {
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
      messages += 1;
      if (first) {
        first = false;
        opened += 1;
        if (opened === count) report({ opened });
      }
    }
    ended += 1;
  } catch (error) {
    const name =
      error instanceof CallError
        ? `${status[error.code]}${error.reason ? `/${error.reason}` : ""}`
        : (error as Error).name;
    errors[name] = (errors[name] ?? 0) + 1;
    if (first) {
      report({ failed: name, message: (error as Error).message, opened });
      process.exit(1);
    }
  }
}

// Alive until SIGTERM, also once every watched session has ended and its stream with it.
const alive = setInterval(() => undefined, 60_000);
process.once("SIGTERM", () => {
  clearInterval(alive);
  report({
    closed: opened - ended - Object.values(errors).reduce((a, b) => a + b, 0),
    opened,
    ended,
    messages,
    errors,
  });
  process.exit(0);
});

for (let i = 0; i < count; i += 1) void follow(i);
