// The floor under `pnpm bench steps`: a process that does only what no agent host can leave out of a
// tool step, on the same stack. It serves OrchestratorService.StartSession over grpc-js
// (protobuf-es on the wire), answers at once, then runs the session's steps in order: each one
// kb-search Search through the same raw client the bare load uses, and, when the request's
// policy is "floor-sqlite", one SQLite write per step (the session row's state and usage, the
// step's result as JSON) through the orchestrator's own group commit. It then logs "session
// ended" as the orchestrator does. It checks nothing, governs nothing and traces nothing: no token
// verification, validation, budgets, leases, audit rows, redaction, spans, metrics or trace file.
// Not a product: a measuring stick.
import { createServer } from "node:http";
import { join } from "node:path";
import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { type sendUnaryData, Server, ServerCredentials, type ServerUnaryCall } from "@grpc/grpc-js";
import { KbSearchService, SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import {
  OrchestratorService,
  SessionState,
  type StartSessionRequest,
  StartSessionRequestSchema,
  type StartSessionResponse,
  StartSessionResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { GroupCommit } from "@loopguard/orchestrator";
import { openSqlite } from "@loopguard/sql-store";
import { createRawClient } from "@loopguard/tool-sdk";
import { collectDefaultMetrics, Registry } from "prom-client";

const kb = createRawClient(KbSearchService, process.env.KB_SEARCH_ADDR ?? "", {
  token: process.env.FLOOR_KB_TOKEN ?? "",
});
const db = openSqlite(join(process.env.FLOOR_DATA_DIR ?? ".", "floor.db"));
db.exec(`CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL, usage TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS steps (session_id TEXT NOT NULL, step INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (session_id, step))`);
const insertSession = db.prepare(
  `INSERT INTO sessions (id, state, version, usage) VALUES (?, 'THINKING', 0, '{"steps":0}')`,
);
const moveSession = db.prepare(`UPDATE sessions SET state = ?, version = version + 1, usage = ? WHERE id = ?`);
const insertStep = db.prepare(`INSERT INTO steps (session_id, step, payload) VALUES (?, ?, ?)`);

/** The orchestrator's own group commit: writes of one turn of the event loop share a commit, 32 at most. */
const commits = new GroupCommit(db, () => undefined);
const write = (fn: () => void): Promise<void> => commits.write(fn);

let sessions = 0;

async function run(id: string, request: StartSessionRequest): Promise<void> {
  const store = request.policy === "floor-sqlite";
  const subgoals = Array.isArray(request.task?.subgoals) ? request.task.subgoals : [];
  const queries = [request.goal, ...subgoals.map(String)];
  for (const [i, query] of queries.entries()) {
    const found = await kb.search({ query, limit: 3 });
    if (store) {
      const payload = JSON.stringify(toJson(SearchResponseSchema, found));
      await write(() => {
        moveSession.run("THINKING", JSON.stringify({ steps: i + 1 }), id);
        insertStep.run(id, i + 1, payload);
      });
    }
  }
  if (store) await write(() => moveSession.run("DONE", JSON.stringify({ steps: queries.length + 1 }), id));
  // The orchestrator's count: a decision per search, and the answer.
  console.log(JSON.stringify({ msg: "session ended", session_id: id, state: "DONE", count: queries.length + 1 }));
}

async function startSession(request: StartSessionRequest): Promise<StartSessionResponse> {
  sessions += 1;
  const id = `floor_${process.pid}_${sessions}`;
  if (request.policy === "floor-sqlite") await write(() => insertSession.run(id));
  void run(id, request).catch((error: unknown) =>
    console.log(JSON.stringify({ msg: "session ended", session_id: id, state: "FAILED", error: String(error) })),
  );
  return create(StartSessionResponseSchema, {
    session: { sessionId: id, state: SessionState.THINKING, goal: request.goal },
    created: true,
  });
}

const server = new Server();
const method = OrchestratorService.method.startSession;
server.addService(
  {
    startSession: {
      path: `/${OrchestratorService.typeName}/${method.name}`,
      requestStream: false,
      responseStream: false,
      requestSerialize: (m: StartSessionRequest) => Buffer.from(toBinary(StartSessionRequestSchema, m)),
      requestDeserialize: (bytes: Buffer) => fromBinary(StartSessionRequestSchema, bytes),
      responseSerialize: (m: StartSessionResponse) => Buffer.from(toBinary(StartSessionResponseSchema, m)),
      responseDeserialize: (bytes: Buffer) => fromBinary(StartSessionResponseSchema, bytes),
    },
  },
  {
    startSession: (
      call: ServerUnaryCall<StartSessionRequest, StartSessionResponse>,
      reply: sendUnaryData<StartSessionResponse>,
    ) => {
      startSession(call.request).then(
        (response) => reply(null, response),
        (error: Error) => reply(error),
      );
    },
  },
);

const registry = new Registry();
collectDefaultMetrics({ register: registry });
const metrics = createServer((_req, res) => {
  void registry.metrics().then((page) => res.end(page));
});
metrics.listen(0, "127.0.0.1", () => {
  server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, port) => {
    if (error) throw error;
    const address = metrics.address();
    const metricsPort = typeof address === "object" && address ? address.port : 0;
    console.log(JSON.stringify({ msg: "serving", address: `127.0.0.1:${port}`, metrics_port: metricsPort }));
  });
});
