// The servers benchmarks call, run in a child process so client and server each have a core:
// "bare" is a plain grpc-js server for the kb-search contract; "tool" is the same handler
// through serveTool (auth, validation both ways, metrics, tracing, shedding).
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { type MessageInitShape, create } from "@bufbuild/protobuf";
import { Server, ServerCredentials } from "@grpc/grpc-js";
import { KbSearchService, SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { createLogger, readPublicKeys, serveTool, serviceDefinition } from "@loopguard/tool-sdk";
import { benchPeople } from "./people.js";

const answer: MessageInitShape<typeof SearchResponseSchema> = {
  hits: [
    {
      docId: "refund-policy",
      version: 3,
      title: "Refund policy",
      snippet: "Refunds are issued to the original payment method…",
      score: 7.25,
      category: "policy",
    },
    {
      docId: "refund-timelines",
      version: 1,
      title: "Refund timelines",
      snippet: "Card refunds take 5-10 business days…",
      score: 4.5,
      category: "policy",
    },
  ],
};
const response = create(SearchResponseSchema, answer);

async function serve(kind: string): Promise<number> {
  if (kind === "bare") {
    const server = new Server();
    server.addService(serviceDefinition(KbSearchService), {
      search: (_call: unknown, callback: (e: null, r: unknown) => void) => callback(null, response),
    });
    return new Promise((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, port) => (e ? reject(e) : resolve(port))),
    );
  }
  const logger = createLogger({ service: "bench", level: "error" });
  // The parent's local people's keys, passed in the environment: tokens the parent mints verify here.
  const options = {
    host: "127.0.0.1",
    port: 0,
    metricsPort: 0,
    publicKeys: readPublicKeys(),
    maxConcurrent: 1024,
    shutdownGraceMs: 1000,
    logger,
  };
  if (kind === "risk-down") {
    const server = await serveTool(
      {
        service: RiskService,
        handlers: {
          queryRisk: async () => ({ riskScore: 1, reason: "ok" }),
          getCustomerRisk: async () => ({ riskScore: 1, reason: "ok" }),
        },
      },
      options,
    );
    server.faults.set({
      $typeName: "loopguard.tool.v1.FaultProfile",
      addedLatencyMs: 0,
      errorRate: 0,
      outage: true,
      retryAfterMs: 0,
      responseDelayMs: 0,
      methods: [],
    });
    return server.port;
  }
  const server = await serveTool({ service: KbSearchService, handlers: { search: async () => answer } }, options);
  return server.port;
}

/** Starts a bench server in a child process; resolves with its address and a stop function. */
export function startBenchServer(kind: "bare" | "tool" | "risk-down"): Promise<{ address: string; stop: () => void }> {
  const child = fork(fileURLToPath(import.meta.url), [kind], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    env: { ...process.env, ...benchPeople().env },
  });
  return new Promise((resolve, reject) => {
    child.once("message", (port) =>
      resolve({ address: `127.0.0.1:${String(port)}`, stop: () => child.kill("SIGKILL") }),
    );
    child.once("exit", (code) => reject(new Error(`bench server ${kind} exited with ${code}`)));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const port = await serve(process.argv[2] ?? "bare");
  process.send?.(port);
}
