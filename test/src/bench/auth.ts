// `pnpm bench auth`: the CPU a tool call's credential costs, per call, on each side, in one process.
// Orchestrator side: ToolTokens minting the token of a call — for a session it already called the
// tool for (cached), for a new session (one Ed25519 signature) and for an irreversible call (a
// signature and a request digest, every call). Tool side: TokenVerifier checking a token it has seen
// (cached) and one it has not (an Ed25519 verification), as every new session brings. The figures
// are CPU microseconds per call (process.cpuUsage over a batch, median of batches); the target of
// the performance issue is 20 µs a call on each side.
import { create } from "@bufbuild/protobuf";
import { ToolRegistry, ToolTokens } from "@loopguard/orchestrator";
import { RefundRequestSchema } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { publicKeySet, readSigningKey, TokenVerifier } from "@loopguard/tool-sdk";
import { readFileSync } from "node:fs";
import { benchPeople } from "./people.js";

const BATCH = 500;
const BATCHES = 9;

/** Median CPU microseconds per call of `call`, each batch given its own inputs by `prepare`. */
async function cpuPerCall<T>(prepare: (i: number) => Promise<T> | T, call: (input: T) => Promise<unknown>) {
  const perBatch: number[] = [];
  for (let b = 0; b < BATCHES; b += 1) {
    const inputs = await Promise.all(Array.from({ length: BATCH }, (_, i) => prepare(b * BATCH + i)));
    const start = process.cpuUsage();
    for (const input of inputs) await call(input);
    const used = process.cpuUsage(start);
    perBatch.push((used.user + used.system) / BATCH);
  }
  return perBatch.sort((a, b) => a - b)[Math.floor(BATCHES / 2)]!;
}

export async function benchAuth(): Promise<void> {
  const people = benchPeople();
  const key = readSigningKey(people.orchestratorEnv);
  const registry = new ToolRegistry();
  const search = registry.list().find((t) => t.tool === "kb-search")!;
  const refund = registry.list().find((t) => t.tool === "billing" && t.method.name === "Refund")!;
  const deadline = () => Date.now() + 60_000;
  const refundRequest = (i: number) =>
    create(RefundRequestSchema, {
      orderId: `ord_${String(i).padStart(12, "0")}`,
      amountCents: 1250n,
      idempotencyKey: `k-${i}`,
    });

  const warm = new ToolTokens(key);
  await warm.for("ses_warm", search, deadline());
  const figures: [string, number][] = [
    [
      "orchestrator: token for a session's next call (cached)",
      await cpuPerCall(
        () => undefined,
        () => warm.for("ses_warm", search, deadline()),
      ),
    ],
    [
      "orchestrator: token for a new session's first call",
      await cpuPerCall(
        (i) => `ses_${i}`,
        (id) => warm.for(id, search, deadline()),
      ),
    ],
    [
      "orchestrator: token bound to an irreversible request",
      await cpuPerCall(refundRequest, (r) => warm.for("ses_warm", refund, deadline(), r)),
    ],
  ];

  const jwks = publicKeySet(JSON.parse(readFileSync(people.env.LOOPGUARD_JWKS_FILE!, "utf8")));
  const verifier = new TokenVerifier(jwks, "kb-search");
  const seen = await warm.for("ses_seen", search, deadline());
  await verifier.verify(seen);
  const fresh = new ToolTokens(key);
  figures.push(
    [
      "tool: a token it has verified before (cached)",
      await cpuPerCall(
        () => seen,
        (t) => verifier.verify(t),
      ),
    ],
    [
      "tool: a new session's token (first sight)",
      await cpuPerCall(
        (i) => fresh.for(`ses_new_${i}`, search, deadline()),
        (t) => verifier.verify(t),
      ),
    ],
  );
  console.log(`auth: CPU per call, median of ${BATCHES} batches of ${BATCH} (target <= 20 µs on each side)`);
  for (const [label, us] of figures) console.log(`  ${label.padEnd(58)} ${us.toFixed(1).padStart(7)} µs`);
}
