// `pnpm release` on real containers (`pnpm containers`, two billing replicas on PostgreSQL) with
// refund and question sessions running through the orchestrator the whole time: a blue-green
// flip of billing through the release gate (smoke calls and the SLO, before and after the flip),
// then a rollback, with no failed session and no failed call (the orchestrator's client counters
// and every billing pod's server counters, less the gate's own smoke calls), every refund exactly
// once in the ledger, the new set serving every call after the flip and the old one after the
// rollback. A version whose image fails 30 % of its reads (LOOPGUARD_FAULT_PROFILE in its
// environment) is stopped by the gate before any session reaches it. The contract gate refuses an
// image whose contracts break the live ones (a throwaway image carrying a changed descriptor set,
// released through the same command), and the `--k8s --dry-run` plans of both cluster paths hold
// objects that pass the strict validation. Needs the containers lock.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Type, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { createRawClient, parseMetrics, samplesOf, smokeCallOf, status, sumOf } from "@loopguard/tool-sdk";
import { localPersonToken } from "@loopguard/tool-sdk/testing";
import pg from "pg";
import { failedOutcome } from "../src/ops/drills/metrics.js";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { type K8sObject, validateRenderings } from "../src/manifests/renderings.js";
import type { K8sReleaseResult, ReleaseResult } from "../src/ops/release/index.js";
import { docker, root, suiteProcesses } from "./suite-processes.js";

const { dataDir, run, state } = suiteProcesses("loopguard-release-");
const TAG = "release-it";
const GREEN = `${TAG}-green`;
const BREAKING = `${TAG}-breaking`;
const FAULTY = `${TAG}-faulty`;
const BILLING = "loopguard.billing.v1.BillingService";
/** Codes a billing pod answers as intended: OK, and the code its contract's smoke check expects (NOT_FOUND for an order no deployment holds). */
const ANSWERED = new Set(["OK", status[smokeCallOf(BillingService).expectCode]]);
const REFUND_WORKERS = 3;

const containers = (...args: string[]) =>
  run(join(root, "deploy", "dist", "local", "containers-main.js"), args, 300_000);
const releaseCli = (...args: string[]) => run(join(root, "deploy", "dist", "ops", "release", "main.js"), args, 300_000);
const billingPods = () => state().pods.filter((p) => p.service === "billing");

/** A throwaway billing image whose contracts change the type of RefundRequest.amount_cents: a wire break. */
async function buildBreakingImage(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-release-breaking-"));
  try {
    const container = await docker(["create", `loopguard/billing:${TAG}`]);
    await docker(["cp", `${container}:/app/contracts.binpb`, join(dir, "live.binpb")]);
    await docker(["rm", "--volumes", container]);
    const set = fromBinary(FileDescriptorSetSchema, readFileSync(join(dir, "live.binpb")));
    const refund = set.file
      .find((f) => f.name === "loopguard/billing/v1/billing.proto")!
      .messageType.find((m) => m.name === "RefundRequest")!;
    refund.field.find((f) => f.name === "amount_cents")!.type = FieldDescriptorProto_Type.STRING;
    writeFileSync(join(dir, "contracts.binpb"), toBinary(FileDescriptorSetSchema, set));
    writeFileSync(
      join(dir, "Dockerfile"),
      `FROM loopguard/billing:${TAG}\nCOPY contracts.binpb /app/contracts.binpb\n`,
    );
    await docker(["build", "--quiet", "--tag", `loopguard/billing:${BREAKING}`, dir]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Builds `loopguard/billing:${to}` as `loopguard/billing:${from}` with `env` added to its environment. */
async function withEnvironment(from: string, to: string, env: Record<string, string>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-release-env-"));
  try {
    const lines = Object.entries(env).map(([key, value]) => `ENV ${key}='${value}'`);
    writeFileSync(join(dir, "Dockerfile"), [`FROM loopguard/billing:${from}`, ...lines, ""].join("\n"));
    await docker(["build", "--quiet", "--tag", `loopguard/billing:${to}`, dir]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const token = (audience: string, scopes: string[]) =>
  localPersonToken(dataDir, audience === "orchestrator" ? "requester" : "operator", audience, scopes);

type Api = ReturnType<typeof createRawClient<typeof OrchestratorService>>;
const TERMINAL = new Set([SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED]);
const CUSTOMER = { id_card: "110101198003121232", phone: "+8613800138000" };
// Small amounts over two paid orders: thousands of refunds stay far below the approval threshold and what was paid.
const ORDERS = ["ord_DEMO00000001", "ord_DEMO00000002"];

interface Outcome {
  readonly kind: "refund" | "question";
  readonly state: SessionState;
  readonly answer: string;
}

async function session(api: Api, kind: "refund" | "question", n: number): Promise<Outcome> {
  const request =
    kind === "refund"
      ? {
          goal: "Refund 0.10 USD: it arrived damaged",
          task: {
            kind: "refund",
            order_id: ORDERS[n % ORDERS.length],
            amount_cents: 10,
            reason: "DAMAGED",
            ...CUSTOMER,
          },
          scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
        }
      : { goal: "How long do card refunds take?", scopes: ["kb:read"] };
  const { session: started } = await api.startSession({ ...request, policy: "scripted" } as never, {
    deadline: 10_000,
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { session: now } = await api.getSession({ sessionId: started!.sessionId }, { deadline: 5000 });
    if (TERMINAL.has(now!.state) || Date.now() > deadline) return { kind, state: now!.state, answer: now!.answer };
    await sleep(50);
  }
}

/** Refund and question sessions started one after the other by each worker (`refundWorkers` refund ones, two question ones) until stopped. */
function sessionLoad(api: Api, refundWorkers: number): { readonly outcomes: Outcome[]; stop(): Promise<void> } {
  const outcomes: Outcome[] = [];
  let stopped = false;
  let n = 0;
  const worker = async (kind: "refund" | "question") => {
    while (!stopped) {
      outcomes.push(
        await session(api, kind, n++).catch((error: Error) => ({
          kind,
          state: SessionState.FAILED,
          answer: error.message,
        })),
      );
      await sleep(100);
    }
  };
  const running = [
    ...Array.from({ length: refundWorkers }, () => worker("refund")),
    worker("question"),
    worker("question"),
  ];
  return {
    outcomes,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

const orchestratorClient = async () =>
  createRawClient(OrchestratorService, "127.0.0.1:50051", {
    token: await token("orchestrator", [
      "sessions:read",
      "sessions:write",
      "grant:kb:read",
      "grant:billing:read",
      "grant:billing:refund",
      "grant:risk:read",
    ]),
  });

/** Over a window of load: calls the orchestrator saw through (not cancelled by itself), calls it cancelled, and calls the live set served. */
interface Window {
  /** Calls the client made from just before the window's first server read to just after its last. */
  readonly madeAround: number;
  /** Calls the client made from just after the window's first server read to just before its last. */
  readonly madeWithin: number;
  readonly cancelled: number;
  readonly served: number;
}

/** A pod's calls: served as intended, failed, and cancelled by the caller (a hedged read's losing attempt). */
interface Served {
  readonly ok: number;
  readonly failed: number;
  readonly cancelled: number;
}

/** Every billing pod's server counters, sampled until stopped; a restarted process's counters add to its earlier ones. */
class ServerCounters {
  readonly #last = new Map<string, Served>();
  readonly #banked = new Map<string, Served>();
  #stop = false;
  readonly done: Promise<void>;

  constructor() {
    this.done = this.#loop();
  }

  async #loop(): Promise<void> {
    while (!this.#stop) {
      await Promise.all(billingPods().map((pod) => this.sample(pod.address)));
      await sleep(200);
    }
  }

  async sample(address: string): Promise<void> {
    const page = await fetch(`http://${address}:9462/metrics`, { signal: AbortSignal.timeout(1000) }).then(
      (r) => r.text(),
      () => undefined,
    );
    if (page === undefined) return;
    const handled = samplesOf(parseMetrics(page), "grpc_server_handled_total", { grpc_service: BILLING });
    const ok = sumOf(handled.filter((s) => ANSWERED.has(s.labels.grpc_code ?? "")));
    const cancelled = sumOf(handled.filter((s) => s.labels.grpc_code === "CANCELLED"));
    const failed = sumOf(handled) - ok - cancelled;
    const last = this.#last.get(address);
    if (last && ok + failed + cancelled < last.ok + last.failed + last.cancelled) {
      const banked = this.#banked.get(address) ?? { ok: 0, failed: 0, cancelled: 0 };
      this.#banked.set(address, {
        ok: banked.ok + last.ok,
        failed: banked.failed + last.failed,
        cancelled: banked.cancelled + last.cancelled,
      });
    }
    this.#last.set(address, { ok, failed, cancelled });
  }

  /** Calls each address served so far (as intended: OK, or the smoke check's expected code), and failed. */
  totals(addresses?: readonly string[]): Served {
    const all = [...new Set([...this.#last.keys(), ...this.#banked.keys()])].filter(
      (a) => !addresses || addresses.includes(a),
    );
    const of = (a: string, key: keyof Served) => (this.#last.get(a)?.[key] ?? 0) + (this.#banked.get(a)?.[key] ?? 0);
    return all.reduce(
      (sum, a) => ({
        ok: sum.ok + of(a, "ok"),
        failed: sum.failed + of(a, "failed"),
        cancelled: sum.cancelled + of(a, "cancelled"),
      }),
      { ok: 0, failed: 0, cancelled: 0 },
    );
  }

  /** Stops sampling after one last sample of every pod: the loop may have slept through the last calls. */
  async stop(): Promise<void> {
    this.#stop = true;
    await this.done;
    await Promise.all(billingPods().map((pod) => this.sample(pod.address)));
  }
}

/**
 * The orchestrator's client counters for billing: RPC attempts by outcome, and calls (what the
 * sessions' policies sent, retries included) that ended failed, as the drill report counts them.
 */
async function clientCalls(): Promise<{
  ok: number;
  failed: number;
  cancelled: number;
  failedCalls: number;
  failedAttempts: string[];
}> {
  const samples = parseMetrics(await (await fetch("http://127.0.0.1:8080/metrics")).text());
  const attempts = samplesOf(samples, "grpc_client_handled_total", { grpc_service: BILLING });
  const ok = sumOf(attempts.filter((s) => s.labels.grpc_code === "OK"));
  const failedAttempts = attempts
    .filter((s) => s.labels.grpc_code !== "OK" && s.value > 0)
    .map((s) => `${s.labels.grpc_method} ${s.labels.grpc_code} × ${s.value}`);
  const calls = samplesOf(samples, "loopguard_tool_client_calls_total", { tool: "billing" });
  const failedCalls = sumOf(calls.filter((s) => failedOutcome(s.labels.outcome ?? "")));
  // Attempts the client itself cancelled: the losers of hedged reads (GetOrder is hedgeable).
  const cancelled = sumOf(attempts.filter((s) => s.labels.grpc_code === "CANCELLED"));
  return { ok, failed: sumOf(attempts) - ok, cancelled, failedCalls, failedAttempts };
}

beforeAll(async () => {
  const images = await run(join(root, "deploy", "dist", "local", "images-main.js"), ["--tag", TAG], 1_500_000);
  if (images.code !== 0)
    throw new Error(`the release tests need the images, and \`pnpm images\` failed:\n${images.stderr}`);
  // Billing's connections age out after 10 s instead of the default 30 s, so clients leave the old
  // colour sooner at each flip; how they leave it is the same.
  await withEnvironment(TAG, TAG, { BILLING_MAX_CONNECTION_AGE_MS: "10000" });
  await docker(["tag", `loopguard/billing:${TAG}`, `loopguard/billing:${GREEN}`]);
  await buildBreakingImage();
  // The live image but for its environment: every tool started from it fails 30 % of GetOrder.
  await withEnvironment(TAG, FAULTY, { LOOPGUARD_FAULT_PROFILE: '{"errorRate": 0.3, "methods": ["GetOrder"]}' });
  const up = await containers("up", "--tag", TAG, "--replicas", "billing=2");
  expect(up.stderr).toBe("");
  expect(up.code).toBe(0);
}, 1_800_000);

afterAll(async () => {
  await containers("down");
  await docker([
    "rmi",
    `loopguard/billing:${GREEN}`,
    `loopguard/billing:${BREAKING}`,
    `loopguard/billing:${FAULTY}`,
  ]).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

describe("pnpm release (local containers)", () => {
  it("refuses an image whose contracts break the live ones, printing buf's findings, and starts nothing", async () => {
    const volumes = () => docker(["volume", "ls", "--quiet"]);
    const before = await volumes();
    const result = await releaseCli("billing", "--to", BREAKING);
    expect(result.code).toBe(1);
    const [first, ...rest] = result.stderr
      .trim()
      .split("\n")
      .filter((line) => !line.startsWith("release: contract gate:"));
    expect(first).toBe(
      `release: the contracts of loopguard/billing:${BREAKING} break those of the live loopguard/billing:${TAG} (buf breaking)`,
    );
    expect(rest.join("\n")).toMatch(
      /loopguard\/billing\/v1\/billing\.proto:.*Field "2" with name "amount_cents" on message "RefundRequest" changed type from "int64" to "string"/,
    );
    expect(billingPods().map((p) => p.colour)).toEqual(["blue", "blue"]);
    await expect(docker(["container", "inspect", "loopguard-billing-green-0"])).rejects.toThrow();
    // Reading the two images' contracts left no container's volume behind.
    expect(await volumes()).toBe(before);
  }, 120_000);

  it("refuses what it cannot do safely, with one line", async () => {
    expect(await releaseCli("billing", "--rollback")).toMatchObject({
      code: 1,
      stderr: "release: nothing to roll back to: billing has no previous set (its green pods)\n",
    });
    expect(await releaseCli("billing", "--to", TAG)).toMatchObject({
      code: 1,
      stderr: `release: billing already runs loopguard/billing:${TAG}\n`,
    });
    expect(await releaseCli("billing", "--to", "no-such-tag")).toMatchObject({
      code: 1,
      stderr: expect.stringContaining(
        "release: image loopguard/billing:no-such-tag is missing: build it with `pnpm images --tag no-such-tag`\n",
      ),
    });
    expect((await releaseCli("risk", "--to", GREEN)).stderr).toMatch(
      /^release: risk keeps its state in SQLite inside its pod: a second set would have a store of its own/,
    );
  }, 120_000);

  it("stops a version failing 30 % of its reads at the gate before the flip: its pods removed, blue never left, no session touched", async () => {
    const api = await orchestratorClient();
    const load = sessionLoad(api, 1);
    let released: Awaited<ReturnType<typeof releaseCli>>;
    const started = Date.now();
    try {
      await sleep(2000);
      released = await releaseCli("billing", "--to", FAULTY);
    } finally {
      await load.stop();
      api.close();
    }
    const lines = released!.stderr.trim().split("\n");
    const refusal = lines.find((l) => l.startsWith(`release: loopguard/billing:${FAULTY} failed`));
    console.info(
      `[release] faulty version: refused after ${Date.now() - started} ms with: ${refusal}; sessions meanwhile: ${load.outcomes.length}`,
    );
    expect(released!.code, released!.stderr).toBe(1);
    expect(refusal).toMatch(
      new RegExp(
        `^release: loopguard/billing:${FAULTY} failed the release gate before the flip: smoke billing GetOrder: \\d+ of 400 calls failed \\(UNAVAILABLE × \\d+[^)]*\\), 6 allowed at a 0\\.5 % error rate; p95 [\\d.]+ ms; its pods are removed and the blue set stays live$`,
      ),
    );
    expect(lines).toContainEqual(
      expect.stringMatching(/^billing GetOrder error ratio [1-4]\d(\.\d)? % \(budget 0\.5 %\): above its budget$/),
    );
    expect(billingPods().map((p) => p.colour)).toEqual(["blue", "blue"]);
    await expect(docker(["container", "inspect", "loopguard-billing-green-0"])).rejects.toThrow();
    expect(load.outcomes.length).toBeGreaterThan(0);
    expect(load.outcomes.filter((o) => o.state !== SessionState.DONE)).toEqual([]);
    expect((await clientCalls()).failedCalls).toBe(0);
  }, 180_000);

  it("flips billing blue → green under load, then rolls back: no failed session or call, every refund once, the live set serves every call", async () => {
    const api = await orchestratorClient();
    const db = new pg.Client({ connectionString: `postgres://postgres@127.0.0.8:5432/billing` });
    await db.connect();
    // Ended here also when an assertion fails first, before the suite stops PostgreSQL under it.
    onTestFinished(() => db.end().catch(() => undefined));
    const { rows: before } = await db.query<{ n: string }>("SELECT max(seq) AS n FROM refunds");
    const counters = new ServerCounters();
    const load = sessionLoad(api, REFUND_WORKERS);
    const outcomes = load.outcomes;
    /**
     * Over a window of load: calls `addresses` served, and calls the orchestrator made to billing,
     * counted twice: `madeAround` from a client read before each server read (every call the window
     * served that ended before the last read), `madeWithin` from a client read after the first server
     * read and before the last (every call it counts was served inside the window, or in flight as it
     * began). The client and server reads are moments apart, and calls go on meanwhile.
     */
    const window = async (addresses: readonly string[]): Promise<Window> => {
      const client = async () => {
        const c = await clientCalls();
        return { made: c.ok + c.failed - c.cancelled, cancelled: c.cancelled };
      };
      const served = async () => {
        await Promise.all(addresses.map((a) => counters.sample(a)));
        return counters.totals(addresses).ok;
      };
      const before = await client();
      const first = await served();
      const afterFirst = await client();
      await sleep(8000);
      const beforeLast = await client();
      const last = await served();
      const after = await client();
      return {
        madeAround: after.made - before.made,
        madeWithin: beforeLast.made - afterFirst.made,
        served: last - first,
        cancelled: after.cancelled - before.cancelled,
      };
    };
    let flip: ReleaseResult;
    let back: ReleaseResult;
    let afterFlip: Window;
    let afterRollback: Window;
    try {
      await sleep(5000);
      const blue = billingPods().map((p) => p.address);
      const released = await releaseCli("billing", "--to", GREEN, "--json");
      expect(released.code, released.stderr).toBe(0);
      flip = JSON.parse(released.stdout.trim().split("\n").at(-1)!) as ReleaseResult;
      const green = billingPods()
        .filter((p) => p.colour === "green")
        .map((p) => p.address);
      expect(flip).toMatchObject({
        tool: "billing",
        kind: "release",
        target: "containers",
        from: { colour: "blue", image: `loopguard/billing:${TAG}` },
        to: { colour: "green", image: `loopguard/billing:${GREEN}` },
        clientsLeftAtDrain: 0,
      });
      for (const pod of billingPods().filter((p) => p.colour === "blue")) {
        expect(
          await docker(["container", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", pod.container]),
        ).toBe("exited 0");
        expect(await docker(["logs", pod.container])).toMatch(/^(?=.*"msg":"draining")(?=.*"in_flight":0\b).*$/m);
      }
      expect((await containers("status")).stdout).toMatch(
        /billing: green live \(loopguard\/billing:release-it-green\); last release at .* from blue :release-it/,
      );
      afterFlip = await window(green);
      expect(blue.every((a) => !green.includes(a))).toBe(true);

      const rolledBack = await releaseCli("billing", "--rollback", "--json");
      expect(rolledBack.code, rolledBack.stderr).toBe(0);
      back = JSON.parse(rolledBack.stdout.trim().split("\n").at(-1)!) as ReleaseResult;
      expect(back).toMatchObject({
        kind: "rollback",
        from: { colour: "green" },
        to: { colour: "blue", image: `loopguard/billing:${TAG}` },
        clientsLeftAtDrain: 0,
      });
      expect(
        billingPods()
          .filter((p) => p.colour === "blue")
          .map((p) => p.address),
      ).toEqual(blue);
      afterRollback = await window(blue);
    } finally {
      await load.stop();
      await counters.stop();
      api.close();
    }
    const { rows: refunds } = await db.query<{ refund_id: string; idempotency_key: string }>(
      "SELECT refund_id, idempotency_key FROM refunds WHERE seq > $1",
      [before[0]?.n ?? 0],
    );
    const client = await clientCalls();
    const server = counters.totals();
    const done = outcomes.filter((o) => o.state === SessionState.DONE);
    const refundIds = done.filter((o) => o.kind === "refund").map((o) => /refund id (\S+)\.$/.exec(o.answer)?.[1]);
    console.info(
      `[release] flip: start ${flip!.timings.startMs} ms, gate ${flip!.timings.gateMs} ms, DNS ${flip!.timings.flipMs} ms, clients moved ${flip!.timings.clientsMovedMs} ms, drain ${flip!.timings.drainMs} ms, total ${flip!.timings.totalMs} ms; ` +
        `rollback: start ${back!.timings.startMs} ms, DNS ${back!.timings.flipMs} ms, clients moved ${back!.timings.clientsMovedMs} ms, drain ${back!.timings.drainMs} ms, total ${back!.timings.totalMs} ms`,
    );
    console.info(
      `[release] sessions: ${outcomes.length} (${refundIds.length} refunds, ${done.length - refundIds.length} questions done, ${outcomes.length - done.length} not done); ` +
        `billing attempts: client ${client.ok} OK / ${client.failed} failed (${client.failedAttempts.join(", ") || "none"}), servers ${server.ok} OK / ${server.failed} failed / ${server.cancelled} cancelled by the client; ` +
        `billing calls failed after their retries: ${client.failedCalls}; ` +
        `8 s after the flip green served ${afterFlip!.served} of ${afterFlip!.madeWithin}–${afterFlip!.madeAround} (+${afterFlip!.cancelled} cancelled), after the rollback blue served ${afterRollback!.served} of ${afterRollback!.madeWithin}–${afterRollback!.madeAround} (+${afterRollback!.cancelled} cancelled)`,
    );
    expect(outcomes.filter((o) => o.state !== SessionState.DONE)).toEqual([]);
    expect(refundIds.length).toBeGreaterThan(50);
    // No call failed (an attempt the client retried, e.g. one caught by a connection's GOAWAY, is not a failed call).
    expect(client.failedCalls).toBe(0);
    expect(server.failed).toBe(0);
    // Every call a billing pod served came from the orchestrator, or was one of the gate's smoke calls (to green, before and after the flip).
    expect(flip!.gate).toMatchObject({
      beforeFlip: expect.arrayContaining([expect.stringMatching(/^smoke billing GetOrder: 0 of 400 calls failed/)]),
      smokeCalls: 800,
    });
    // A hedge's losing attempt the client cancelled was served OK, cancelled, or never reached the pod.
    expect(server.ok).toBeGreaterThanOrEqual(client.ok + flip!.gate!.smokeCalls!);
    expect(server.ok).toBeLessThanOrEqual(client.ok + flip!.gate!.smokeCalls! + client.cancelled - server.cancelled);
    expect(server.cancelled).toBeLessThanOrEqual(client.cancelled);
    // The live set served every call made inside the window, but those in flight as it began (at most one per
    // refund worker), and no more than the calls made around it, those in flight as it ended, and hedges' losers the
    // client cancelled.
    for (const { madeAround, madeWithin, served, cancelled } of [afterFlip!, afterRollback!]) {
      expect(madeWithin).toBeGreaterThan(20);
      expect(served).toBeGreaterThanOrEqual(madeWithin - REFUND_WORKERS);
      expect(served).toBeLessThanOrEqual(madeAround + cancelled + REFUND_WORKERS);
    }
    // Every DONE refund once in the ledger, and nothing in the ledger no session owns.
    expect(new Set(refundIds).size).toBe(refundIds.length);
    expect(refunds.map((r) => r.refund_id).sort()).toEqual([...refundIds].sort());
    for (const refund of refunds) expect(refund.idempotency_key).toMatch(/^lg-/);
  }, 600_000);
});

describe("pnpm release --k8s --dry-run", () => {
  /** prod + a release path, with billing's image pointed at the local build so the gate can read it. */
  function overlay(component: string): string {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-release-overlay-"));
    const k8s = join(root, "deploy", "k8s");
    writeFileSync(
      join(dir, "kustomization.yaml"),
      [
        `resources: [${JSON.stringify(relative(dir, join(k8s, "overlays", "prod")))}]`,
        `components: [${JSON.stringify(relative(dir, join(k8s, "components", component)))}]`,
        "images:",
        `  - { name: registry.example.com/loopguard/billing, newName: loopguard/billing, newTag: ${TAG} }`,
        "",
      ].join("\n"),
    );
    return dir;
  }

  it.each(["plain-blue-green", "argo-rollouts"])(
    "%s: plans through the gate, prints every patch and the object it leaves, and those validate strictly",
    async (component) => {
      const dir = overlay(component);
      try {
        const result = await releaseCli(
          "billing",
          "--to",
          GREEN,
          "--k8s",
          "--dry-run",
          "--from-manifests",
          dir,
          "--json",
        );
        expect(result.code, result.stderr).toBe(0);
        expect(result.stderr).toContain("release: contract gate: compatible");
        const planned = JSON.parse(result.stdout.trim().split("\n").at(-1)!) as K8sReleaseResult;
        expect(planned).toMatchObject({
          dryRun: true,
          target: component,
          from: { image: `loopguard/billing:${TAG}` },
          to: { image: `loopguard/billing:${GREEN}` },
        });
        const objects = planned.plan.steps.flatMap((step) =>
          step.action === "patch" ? [step.result as K8sObject] : [],
        );
        expect(objects.length).toBeGreaterThan(0);
        expect(validateRenderings([{ name: component, objects }])).toEqual([]);
        const refused = await releaseCli("billing", "--to", BREAKING, "--k8s", "--dry-run", "--from-manifests", dir);
        expect(refused.code).toBe(1);
        expect(refused.stderr).toContain(
          `release: the contracts of loopguard/billing:${BREAKING} break those of the live loopguard/billing:${TAG} (buf breaking)`,
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
