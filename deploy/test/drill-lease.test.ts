// One drill at a time on a cluster: the runner's Lease against a small Kubernetes API on loopback
// (no cluster runs here) that keeps a Lease as the API server does: a create of one that exists,
// and a replace or a delete at a stale resourceVersion, are 409. Two runners at once, a runner that
// died, a runner whose Lease was taken — and only the calls RUNNER_API_CALLS declares (the Role).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { type ApiCall, DRILL_LEASE, RUNNER_API_CALLS } from "../src/manifests/drill-api-calls.js";
import { type DrillKube, drillKube } from "../src/ops/drills/cluster-api.js";
import { DrillError } from "../src/ops/drills/drill-error.js";
import { type HeldLease, holdDrillLease } from "../src/ops/drills/drill-lease.js";
import { runClusterDrill } from "../src/ops/drills/k8s.js";
import { parseDrillArgs } from "../src/ops/drills/options.js";
import { loopbackKubeConfig, RUNNER_TOKEN } from "./loopback-kube.js";

const PATH = `/apis/coordination.k8s.io/v1/namespaces/loopguard/leases`;

/** The Lease as the fake API server stores it; undefined when there is none. */
let stored: { metadata: { name: string; resourceVersion: string }; spec: Record<string, unknown> } | undefined;
let version = 0;
/** Every Lease call refused (403), as by a Role rendered before the runner took the Lease. */
let forbidden = false;
/** The API server down: every call answered 503. */
let down = false;
/** The API server silent on writes: a replace is never answered (until the test ends it). */
let silent = false;
const unanswered: import("node:http").ServerResponse[] = [];
const calls: (ApiCall & { auth: string | undefined })[] = [];
let api: Server;
let port: number;

function status(res: import("node:http").ServerResponse, code: number, reason: string) {
  res.writeHead(code, { "content-type": "application/json" });
  res.end(JSON.stringify({ apiVersion: "v1", kind: "Status", status: "Failure", reason, code }));
}

beforeAll(async () => {
  api = createServer((req, res) => {
    let text = "";
    req.on("data", (chunk: Buffer) => (text += chunk));
    req.on("end", () => {
      const body = (text ? JSON.parse(text) : {}) as {
        metadata?: { resourceVersion?: string };
        spec?: Record<string, unknown>;
        preconditions?: { resourceVersion?: string };
      };
      const url = new URL(req.url!, "http://api");
      const name = url.pathname.startsWith(`${PATH}/`) ? url.pathname.slice(PATH.length + 1) : undefined;
      const verb = { GET: "get", POST: "create", PUT: "update", DELETE: "delete" }[req.method!]!;
      calls.push({
        group: "coordination.k8s.io",
        resource: "leases",
        verb,
        ...(name ? { resourceName: name } : {}),
        auth: req.headers.authorization,
      });
      if (!url.pathname.startsWith(PATH) || (name && name !== DRILL_LEASE)) return status(res, 404, "NotFound");
      if (forbidden) return status(res, 403, "Forbidden");
      if (down) return status(res, 503, "ServiceUnavailable");
      if (silent && verb === "update") return void unanswered.push(res);
      const answer = () => {
        res.writeHead(verb === "create" ? 201 : 200, { "content-type": "application/json" });
        res.end(JSON.stringify({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", ...stored }));
      };
      if (verb === "get") return stored ? answer() : status(res, 404, "NotFound");
      if (verb === "create") {
        if (stored) return status(res, 409, "AlreadyExists");
        stored = { metadata: { name: DRILL_LEASE, resourceVersion: String(++version) }, spec: body.spec ?? {} };
        return answer();
      }
      if (verb === "update") {
        const at = body.metadata?.resourceVersion;
        if (!stored) return status(res, 404, "NotFound");
        if (at !== stored.metadata.resourceVersion) return status(res, 409, "Conflict");
        stored = { metadata: { name: DRILL_LEASE, resourceVersion: String(++version) }, spec: body.spec ?? {} };
        return answer();
      }
      const at = body.preconditions?.resourceVersion;
      if (!stored) return status(res, 404, "NotFound");
      if (at !== stored.metadata.resourceVersion) return status(res, 409, "Conflict");
      stored = undefined;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ apiVersion: "v1", kind: "Status", status: "Success" }));
    });
  });
  port = await new Promise((done) => api.listen(0, "127.0.0.1", () => done((api.address() as AddressInfo).port)));
});

afterAll(() => api.close());

beforeEach(() => {
  stored = undefined;
});

const kube = (): DrillKube => drillKube(loopbackKubeConfig(port), "loopguard");

/** A Lease another runner left: `agoS` seconds since its last renewal, for `durationS`. */
function leftBy(holder: string, agoS: number, durationS = 60) {
  const renewed = new Date(Date.now() - agoS * 1000).toISOString();
  stored = {
    metadata: { name: DRILL_LEASE, resourceVersion: String(++version) },
    spec: { holderIdentity: holder, acquireTime: renewed, renewTime: renewed, leaseDurationSeconds: durationS },
  };
}

/** Cuts a runner holding a 2 s Lease off with `cut`, and waits for its run to stop before the Lease lapses, saying why. */
async function expectStopBeforeLapse(held: HeldLease, why: string, cut: () => void): Promise<void> {
  const lapses = Date.parse(String(stored!.spec.renewTime)) + 2000;
  let stoppedAt = 0;
  held.lost.addEventListener("abort", () => (stoppedAt = Date.now()));
  cut();
  await vi.waitFor(() => expect(held.lost.aborted).toBe(true), { timeout: 5000, interval: 20 });
  expect(stoppedAt).toBeLessThan(lapses);
  expect((held.lost.reason as Error).message).toMatch(
    new RegExp(
      `^the drill could not renew Lease loopguard/loopguard-drill for \\d+ s \\(${why}\\): stopped before it lapses, as another drill may then start$`,
    ),
  );
}

/** Runners `runs` try to take the Lease at once: exactly one holds it, each other is told which one does. */
async function expectOneOf(runs: readonly string[]): Promise<void> {
  const results = await Promise.allSettled(runs.map((run) => holdDrillLease(kube(), run, "loopguard")));
  const held = results.flatMap((r, i) => (r.status === "fulfilled" ? [{ run: runs[i]!, lease: r.value }] : []));
  expect(held).toHaveLength(1);
  for (const r of results)
    if (r.status === "rejected")
      expect((r.reason as Error).message).toMatch(new RegExp(`^another drill runs on this cluster: ${held[0]!.run},`));
  await held[0]!.lease.release();
}

describe("one drill at a time on a cluster", () => {
  it("takes the Lease, refuses a second drill naming the first, and frees the cluster when done — within RUNNER_API_CALLS", async () => {
    calls.length = 0;
    const first = await holdDrillLease(kube(), "kill-tool-kb-search-20261206T080000", "loopguard");
    expect(stored?.spec).toMatchObject({
      holderIdentity: "kill-tool-kb-search-20261206T080000",
      leaseDurationSeconds: 60,
    });
    const refused = await holdDrillLease(kube(), "latency-kb-search-20261206T080100", "loopguard").catch((e) => e);
    expect(refused).toBeInstanceOf(DrillError);
    expect(refused.message).toMatch(
      /^another drill runs on this cluster: kill-tool-kb-search-20261206T080000, since 20\d\d-.*\(Lease loopguard\/loopguard-drill, renewed .*\)\. Two drills at once would each take the other's kills and refunds for their own: wait for it to end \(kubectl -n loopguard get jobs\)\. A runner that died frees the cluster once the next one has watched its Lease go unrenewed for 60 s$/,
    );
    await first.release();
    expect(stored).toBeUndefined();
    const third = await holdDrillLease(kube(), "flap-kb-search-20261206T080200", "loopguard");
    await third.release();

    for (const call of calls) expect(call.auth).toBe(`Bearer ${RUNNER_TOKEN}`);
    const made = calls.map(({ auth: _, ...call }) => call);
    const leaseCalls = RUNNER_API_CALLS.filter((c) => c.resource === "leases");
    for (const call of made) expect(leaseCalls).toContainEqual(call);
    for (const declared of leaseCalls.filter((c) => c.verb !== "update")) expect(made).toContainEqual(declared);
  });

  it("lets exactly one of two drills that start at once run", async () => {
    await expectOneOf(["kill-tool-billing-a", "kill-tool-billing-b", "kill-tool-billing-c"]);
  });

  it("refuses at once a Lease renewed within its duration by this pod's clock", async () => {
    leftBy("kill-tool-kb-search-dead", 59);
    await expect(holdDrillLease(kube(), "latency-kb-search-next", "loopguard")).rejects.toThrow(
      /runs on this cluster: kill-tool-kb-search-dead/,
    );
  });

  it("takes over the Lease of a runner that died once it has gone unchanged for its duration on this pod's clock", async () => {
    leftBy("kill-tool-kb-search-dead", 5, 1);
    const lines: string[] = [];
    const since = performance.now();
    const next = await holdDrillLease(kube(), "latency-kb-search-next", "loopguard", {
      progress: (line) => lines.push(line),
    });
    expect(performance.now() - since).toBeGreaterThanOrEqual(1000);
    expect(stored?.spec.holderIdentity).toBe("latency-kb-search-next");
    expect(lines).toEqual([
      expect.stringMatching(
        /^Lease loopguard\/loopguard-drill of kill-tool-kb-search-dead was last renewed 20\d\d-.*, lapsed by this pod's clock, which may run ahead of its holder's: watching it for 1 s before taking it over$/,
      ),
    ]);
    await next.release();
  });

  it("lets exactly one of several runners watching a dead runner's Lease take it over", async () => {
    leftBy("kill-tool-kb-search-dead", 5, 1);
    await expectOneOf(["latency-kb-search-a", "latency-kb-search-b", "latency-kb-search-c"]);
  });

  it("takes over only on a read sent after the whole duration: a runner stalled past it reads the Lease once more", async () => {
    leftBy("kill-tool-kb-search-alive", 5, 1);
    const renewal = setTimeout(() => {
      stored = { metadata: { name: DRILL_LEASE, resourceVersion: String(++version) }, spec: { ...stored!.spec } };
    }, 300);
    const direct = kube();
    let reads = 0;
    // The second read's answer is still the old Lease, and the runner stalls past the duration after it.
    const stalled: DrillKube = {
      ...direct,
      readLease: async () => {
        const lease = await direct.readLease();
        if (++reads === 2) await new Promise((done) => setTimeout(done, 1200));
        return lease;
      },
    };
    try {
      await expect(holdDrillLease(stalled, "latency-kb-search-next", "loopguard")).rejects.toThrow(
        /^another drill runs on this cluster: kill-tool-kb-search-alive/,
      );
      expect(stored?.spec.holderIdentity).toBe("kill-tool-kb-search-alive");
    } finally {
      clearTimeout(renewal);
    }
  });

  it("stops watching a Lease that looks lapsed when the run is cancelled, and leaves it as it was", async () => {
    leftBy("kill-tool-kb-search-dead", 5, 1);
    const left = stored;
    const stop = new AbortController();
    setTimeout(() => stop.abort(new Error("the runner was stopped (SIGTERM)")), 200);
    const run = holdDrillLease(kube(), "latency-kb-search-next", "loopguard", { signal: stop.signal });
    await expect(run).rejects.toThrow(new Error("the runner was stopped (SIGTERM)"));
    expect(stored).toBe(left);
  });

  it("does not take a live Lease that looks lapsed only because this pod's clock runs ahead of its holder's", async () => {
    // Renewed 5 s ago by this pod's clock, its duration 1 s: lapsed, were the clocks the same.
    leftBy("kill-tool-kb-search-alive", 5, 1);
    const renewal = setTimeout(() => {
      stored = { metadata: { name: DRILL_LEASE, resourceVersion: String(++version) }, spec: { ...stored!.spec } };
    }, 300);
    try {
      await expect(holdDrillLease(kube(), "latency-kb-search-next", "loopguard")).rejects.toThrow(
        /^another drill runs on this cluster: kill-tool-kb-search-alive/,
      );
      expect(stored?.spec.holderIdentity).toBe("kill-tool-kb-search-alive");
    } finally {
      clearTimeout(renewal);
    }
  });

  it("renews its Lease while it runs, and stops its run when another runner took it", async () => {
    calls.length = 0;
    const held = await holdDrillLease(kube(), "kill-tool-kb-search-long", "loopguard", { durationS: 1 });
    const acquired = stored!.spec.renewTime;
    await vi.waitFor(() => expect(stored!.spec.renewTime).not.toBe(acquired), { timeout: 5000, interval: 50 });
    expect(calls.some((c) => c.verb === "update")).toBe(true);
    expect(held.lost.aborted).toBe(false);
    // A renewal whose answer was lost: the Lease moved on, still this runner's. It renews on from there.
    const renewed = stored!.spec.renewTime;
    stored = { metadata: { name: DRILL_LEASE, resourceVersion: String(++version) }, spec: { ...stored!.spec } };
    await vi.waitFor(() => expect(stored!.spec.renewTime).not.toBe(renewed), { timeout: 5000, interval: 50 });
    expect(held.lost.aborted).toBe(false);
    // Another runner's now (as if this one had gone unrenewed): the next renewal finds it changed.
    leftBy("latency-kb-search-other", 0);
    await vi.waitFor(() => expect(held.lost.aborted).toBe(true), { timeout: 5000, interval: 50 });
    expect((held.lost.reason as Error).message).toBe(
      "the drill lost Lease loopguard/loopguard-drill (now latency-kb-search-other's): stopped",
    );
    await held.release();
    // The other runner's Lease is left alone.
    expect(stored?.spec.holderIdentity).toBe("latency-kb-search-other");
  });

  it("stops its run, while its Lease still holds, when the API does not answer its renewals — its wall clock stepped back meanwhile", async () => {
    let stepBackMs = 0;
    const held = await holdDrillLease(kube(), "kill-tool-kb-search-cut-off", "loopguard", {
      durationS: 2,
      now: () => new Date(Date.now() - stepBackMs),
    });
    try {
      await expectStopBeforeLapse(held, ".*", () => {
        down = true;
        stepBackMs = 3_600_000;
      });
      await held.release();
    } finally {
      down = false;
    }
  });

  it("stops its run, while its Lease still holds, when the API never answers its renewals, and releases without waiting for them", async () => {
    const held = await holdDrillLease(kube(), "kill-tool-kb-search-unanswered", "loopguard", { durationS: 2 });
    try {
      await expectStopBeforeLapse(held, "no answer", () => {
        silent = true;
      });
      const releasing = performance.now();
      await held.release();
      expect(performance.now() - releasing).toBeLessThan(1000);
    } finally {
      silent = false;
      for (const res of unanswered.splice(0)) status(res, 503, "ServiceUnavailable");
    }
  });

  it("gives up on a renewal the API leaves unanswered, and renews on once it answers again", async () => {
    const held = await holdDrillLease(
      drillKube(loopbackKubeConfig(port), "loopguard", { callTimeoutMs: 100 }),
      "kill-tool-kb-search-blip",
      "loopguard",
      // Renewals every 750 ms: the one after the unanswered one goes through 750 ms before the run would be stopped.
      { durationS: 3 },
    );
    silent = true;
    try {
      await vi.waitFor(() => expect(unanswered.length).toBeGreaterThan(0), { timeout: 5000, interval: 20 });
      silent = false;
      const silentSince = stored!.spec.renewTime;
      await vi.waitFor(() => expect(stored!.spec.renewTime).not.toBe(silentSince), { timeout: 5000, interval: 20 });
      expect(held.lost.aborted).toBe(false);
      await held.release();
      expect(stored).toBeUndefined();
    } finally {
      silent = false;
      for (const res of unanswered.splice(0)) status(res, 503, "ServiceUnavailable");
    }
  });

  it("says what to do when the runner's Role may not use the Lease (rendered by an earlier release)", async () => {
    forbidden = true;
    try {
      await expect(holdDrillLease(kube(), "kill-tool-kb-search-x", "loopguard")).rejects.toThrow(
        new DrillError(
          "the runner's Role may not use Lease loopguard/loopguard-drill, which keeps drills one at a time: apply this release's chaos-drills component",
        ),
      );
    } finally {
      forbidden = false;
    }
  });

  it("a cluster drill refuses before it makes anything while another drill holds the Lease", async () => {
    leftBy("kill-tool-billing-running", 5);
    const made: string[] = [];
    const ready = { ready: true, terminating: false, restarts: 0 };
    const runner: DrillKube = {
      ...kube(),
      pods: async () => [
        { name: "kb-search-a", uid: "a", ...ready },
        { name: "kb-search-b", uid: "b", ...ready },
      ],
      metricsUrls: async () => {
        made.push("metrics read");
        return new Map();
      },
      createPodChaos: async () => {
        made.push("PodChaos");
      },
    };
    const options = parseDrillArgs(["kill-tool", "--tool", "kb-search", "--k8s"], {
      tools: ["kb-search"],
      orchestrator: "orchestrator",
      methodsOf: () => ["Search"],
    });
    const services = [
      { name: "orchestrator", kind: "orchestrator" as const, port: 50051 },
      { name: "billing", kind: "tool" as const, port: 50062 },
      { name: "kb-search", kind: "tool" as const, port: 50061 },
    ];
    const run = runClusterDrill(
      options,
      {
        root: "/nonexistent",
        reportsDir: "/nonexistent",
        services,
        progress: () => {},
        signal: new AbortController().signal,
      },
      { kube: runner, namespace: "loopguard" },
    );
    await expect(run).rejects.toThrow(/^another drill runs on this cluster: kill-tool-billing-running/);
    expect(made).toEqual([]);
    expect(stored?.spec.holderIdentity).toBe("kill-tool-billing-running");
  });
});
