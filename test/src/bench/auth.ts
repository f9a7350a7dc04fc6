// `pnpm bench auth`: the CPU a tool call's credential costs, per call, on each side, in one process,
// for both kinds the orchestrator can send: a call credential (HS256 under the tool's own derived
// key, with LOOPGUARD_CALL_SECRETS_FILE — what `pnpm start` and the manifests configure) and, as the
// baseline, an Ed25519-signed token (an orchestrator without call secrets).
// Orchestrator side: ToolTokens making the credential of a call — for a session it already called
// the tool for (cached), for a new session, and for an irreversible call (a request digest and a
// credential, every call). Tool side: TokenVerifier checking a credential it has seen (cached) and
// one it has not, as every new session brings, and an irreversible call's request binding (the
// digest of the decoded request). CPU microseconds per call (process.cpuUsage over a batch, median
// of batches); the target of the performance issue is 20 µs a call on each side.
import { create } from "@bufbuild/protobuf";
import { ToolRegistry, ToolTokens } from "@loopguard/orchestrator";
import { RefundRequestSchema } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import {
  publicKeySet,
  readCallKeys,
  readCallSecrets,
  readSigningKey,
  requestDigest,
  TokenVerifier,
} from "@loopguard/tool-sdk";
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

type Figure = [label: string, signed: number, call: number];

export async function benchAuth(): Promise<void> {
  const people = benchPeople();
  const key = readSigningKey(people.orchestratorEnv);
  const secrets = readCallSecrets(people.orchestratorEnv)!;
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
  const jwks = publicKeySet(JSON.parse(readFileSync(people.env.LOOPGUARD_JWKS_FILE!, "utf8")));
  const kbKeys = people.env.KB_SEARCH_CALL_KEYS_FILE!;

  /** The five figures for one kind of credential: `tokens` makes them, a kb-search verifier checks them. */
  async function side(tokens: () => ToolTokens, withCallKeys: boolean): Promise<number[]> {
    const warm = tokens();
    await warm.for("ses_warm", search, deadline());
    const verifier = new TokenVerifier(jwks, "kb-search", {
      ...(withCallKeys
        ? { callKeys: { file: kbKeys, keys: readCallKeys(JSON.parse(readFileSync(kbKeys, "utf8")), "kb-search") } }
        : {}),
    });
    const seen = await warm.for("ses_seen", search, deadline());
    await verifier.verify(seen);
    const fresh = tokens();
    return [
      await cpuPerCall(
        () => undefined,
        () => warm.for("ses_warm", search, deadline()),
      ),
      await cpuPerCall(
        (i) => `ses_${i}`,
        (id) => warm.for(id, search, deadline()),
      ),
      await cpuPerCall(refundRequest, (r) => warm.for("ses_warm", refund, deadline(), r)),
      await cpuPerCall(
        () => seen,
        (t) => verifier.verify(t),
      ),
      await cpuPerCall(
        (i) => fresh.for(`ses_new_${i}`, search, deadline()),
        (t) => verifier.verify(t),
      ),
    ];
  }
  const signed = await side(() => new ToolTokens(key), false);
  const call = await side(() => new ToolTokens(key, secrets), true);
  const labels = [
    "orchestrator: a session's next call (cached)",
    "orchestrator: a new session's first call",
    "orchestrator: an irreversible call (bound to the request)",
    "tool: a credential it has checked before (cached)",
    "tool: a new session's credential (first sight)",
  ];
  const figures: Figure[] = labels.map((label, i) => [label, signed[i]!, call[i]!]);
  // The tool's half of an irreversible call's binding: the digest of the request it decoded.
  const digest = await cpuPerCall(refundRequest, async (r) => requestDigest(RefundRequestSchema, r));
  console.log(`auth: CPU per call, median of ${BATCHES} batches of ${BATCH} (target <= 20 µs on each side)`);
  console.log(`  ${"".padEnd(60)} ${"Ed25519".padStart(9)} ${"call key".padStart(9)}`);
  for (const [label, a, b] of figures)
    console.log(`  ${label.padEnd(60)} ${a.toFixed(1).padStart(6)} µs ${b.toFixed(1).padStart(6)} µs`);
  console.log(
    `  ${"tool: an irreversible call's request digest (both kinds)".padEnd(60)} ${digest.toFixed(1).padStart(6)} µs`,
  );
}
