// WAL checkpoints off the write path. With SQLite's automatic checkpoint, the commit that pushes
// the WAL past 1,000 pages copies them into the database file itself, so roughly one transition
// in a few hundred stalls for a whole checkpoint (the p99). Instead the writing connection turns
// automatic checkpoints off and a worker thread, on its own connection, runs a PASSIVE checkpoint
// every interval: it copies committed pages while writers go on, and the writer recycles the WAL
// once everything in it has been copied. Written by hand because the driver has no background
// checkpointer; better-sqlite3's performance notes recommend periodic explicit checkpoints.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** The worker's whole program, CommonJS, so it runs the same from compiled and from test sources. */
const PROGRAM = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.file);
db.pragma("busy_timeout = 1000");
const timer = setInterval(() => {
  try {
    db.pragma("wal_checkpoint(PASSIVE)");
  } catch {
    // Busy or failing now: the next interval tries again, and the WAL only grows meanwhile.
  }
}, workerData.intervalMs);
parentPort.once("message", () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

export class SqliteCheckpointer {
  readonly #worker: Worker;
  readonly #exited: Promise<unknown>;

  constructor(file: string, intervalMs = 200) {
    const driver = createRequire(import.meta.url).resolve("better-sqlite3");
    this.#worker = new Worker(PROGRAM, { eval: true, workerData: { file, driver, intervalMs } });
    // A failing checkpointer must not take the orchestrator down; the WAL then just grows.
    this.#worker.on("error", () => undefined);
    this.#exited = new Promise((resolve) => this.#worker.once("exit", resolve));
    this.#worker.unref();
  }

  async stop(): Promise<void> {
    this.#worker.ref();
    this.#worker.postMessage("stop");
    await this.#exited;
  }
}
