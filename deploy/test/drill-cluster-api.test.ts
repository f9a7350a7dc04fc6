// The in-cluster drill runner's Kubernetes client against a small Kubernetes API on loopback (no
// cluster runs here): it lists the target's ready pods, finds every orchestrator replica through
// the EndpointSlices of its headless Service, creates, reads and deletes PodChaos objects — and
// makes no API call beyond RUNNER_API_CALLS, the list the shipped Role is generated from. A kill
// counts only once its pods are known dead (the PodChaos's status records them killed, or they are
// seen deleted, being deleted, or with a container restarted — a pod made after the runner's list
// too, as an autoscaler's during a kill of one): a PodChaos that Chaos Mesh never acts on fails
// the drill, naming the pods that lived on. The replicas are
// two real metrics pages (prom-client registries on loopback), and the report's figures are their
// sum, read from each page or through a real Prometheus scraping both (Debian's `prometheus`).
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Counter, Registry } from "prom-client";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ApiCall, RUNNER_API_CALLS } from "../src/manifests/drill-api-calls.js";
import { drillKube } from "../src/ops/drills/cluster-api.js";
import { DrillError } from "../src/ops/drills/drill-error.js";
import { podChaosKills, podChaosPlan } from "../src/ops/drills/k8s.js";
import { MetricsSampler, podPages, prometheusPages, toolCallFigures } from "../src/ops/drills/metrics.js";
import { parseDrillArgs } from "../src/ops/drills/options.js";
import { toYaml } from "../src/manifests/yaml.js";
import { loopbackKubeConfig, RUNNER_TOKEN } from "./loopback-kube.js";
import { findExecutable } from "./promtool.js";

function listen(server: Server): Promise<number> {
  return new Promise((done) => server.listen(0, "127.0.0.1", () => done((server.address() as AddressInfo).port)));
}

/** One orchestrator replica's page: the counters the report reads. */
function replica(offered: number, attempts: number): { registry: Registry; calls: Counter; handled: Counter } {
  const registry = new Registry();
  const calls = new Counter({
    name: "loopguard_tool_client_calls_total",
    help: "h",
    labelNames: ["tool", "method", "outcome", "grpc_code"],
    registers: [registry],
  });
  const handled = new Counter({
    name: "grpc_client_handled_total",
    help: "h",
    labelNames: ["grpc_service", "grpc_method", "grpc_code"],
    registers: [registry],
  });
  calls.inc({ tool: "kb-search", method: "Search", outcome: "ok", grpc_code: "OK" }, offered);
  handled.inc({ grpc_service: "loopguard.kb.v1.KbSearchService", grpc_method: "Search", grpc_code: "OK" }, attempts);
  return { registry, calls, handled };
}

/** What the fake API server was asked, as RBAC sees it: group, resource, verb. */
function asApiCall(request: IncomingMessage): ApiCall {
  const url = new URL(request.url!, "http://api");
  const parts = url.pathname.split("/").filter(Boolean);
  // /api/v1/namespaces/NS/RES[/NAME] or /apis/GROUP/VERSION/namespaces/NS/RES[/NAME]
  const [group, rest] = parts[0] === "api" ? ["", parts.slice(2)] : [parts[1]!, parts.slice(3)];
  const [, , resource, name] = rest;
  const verb = { GET: name ? "get" : "list", POST: "create", DELETE: "delete", PATCH: "patch", PUT: "update" }[
    request.method!
  ]!;
  return { group, resource: resource!, verb };
}

const pod = (name: string, ready: boolean, terminating = false, restarts = 0) => ({
  metadata: {
    name,
    uid: `uid-${name}`,
    namespace: "loopguard",
    ...(terminating ? { deletionTimestamp: "2026-12-01T00:00:00Z" } : {}),
  },
  status: {
    conditions: [{ type: "Ready", status: ready ? "True" : "False" }],
    containerStatuses: [{ name: "tool", image: "x", imageID: "", ready, restartCount: restarts }],
  },
});
const PODS = [
  pod("kb-search-a", true),
  pod("kb-search-b", true),
  pod("kb-search-c", false),
  pod("kb-search-d", true, true),
];
/** The pods the fake API lists; what a created PodChaos does to them (a Chaos Mesh controller, or none). */
let pods: object[] = PODS;
let chaosMesh: (pods: object[]) => object[] = (p) => p;
/** What changes the pods after each list is answered, one change a list: an autoscaler, a Chaos Mesh acting later. */
let afterList: ((pods: object[]) => object[])[] = [];
/** The status Chaos Mesh writes on a created PodChaos (none: not written yet, or no controller). */
let chaosStatus: object | undefined;
/** The HTTP status a get of a PodChaos is answered with instead (403: a Role rendered before the runner read it). */
let chaosGetRefused: number | undefined;
const chaosObjects = new Map<string, object>();

let api: Server;
let apiPort: number;
const pages: Server[] = [];
const pagePorts: number[] = [];
const replicas = [replica(30, 34), replica(12, 12)];
const calls: (ApiCall & { auth: string | undefined; selector: string | null; body: unknown })[] = [];

beforeAll(async () => {
  for (const r of replicas) {
    const server = createServer(async (_, res) => res.end(await r.registry.metrics()));
    pages.push(server);
    pagePorts.push(await listen(server));
  }
  api = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk));
    req.on("end", () => {
      const call = asApiCall(req);
      calls.push({
        ...call,
        auth: req.headers.authorization,
        selector: new URL(req.url!, "http://api").searchParams.get("labelSelector"),
        body: body ? JSON.parse(body) : undefined,
      });
      const json = (value: object, status = 200) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(value));
      };
      if (call.resource === "pods") {
        json({ apiVersion: "v1", kind: "PodList", metadata: {}, items: pods });
        pods = afterList.shift()?.(pods) ?? pods;
        return;
      }
      if (call.resource === "endpointslices") {
        return json({
          apiVersion: "discovery.k8s.io/v1",
          kind: "EndpointSliceList",
          metadata: {},
          items: [
            {
              metadata: { name: "orchestrator-x1" },
              addressType: "IPv4",
              ports: [
                { name: "grpc", port: 50051, protocol: "TCP" },
                { name: "http", port: pagePorts[0], protocol: "TCP" },
              ],
              endpoints: [
                {
                  addresses: ["127.0.0.1"],
                  targetRef: { kind: "Pod", name: "orchestrator-a" },
                  conditions: { ready: true },
                },
              ],
            },
            {
              metadata: { name: "orchestrator-x2" },
              addressType: "IPv4",
              ports: [{ name: "http", port: pagePorts[1], protocol: "TCP" }],
              // Terminating: not ready, still answering; its figures count.
              endpoints: [
                {
                  addresses: ["127.0.0.1"],
                  targetRef: { kind: "Pod", name: "orchestrator-b" },
                  conditions: { ready: false, terminating: true },
                },
              ],
            },
          ],
        });
      }
      if (call.resource === "podchaos" && call.verb === "create") {
        pods = chaosMesh(pods);
        const created = JSON.parse(body) as { metadata: { name: string } };
        chaosObjects.set(created.metadata.name, created);
        return json(created, 201);
      }
      if (call.resource === "podchaos" && call.verb === "get" && chaosGetRefused)
        return json({ kind: "Status", status: "Failure", code: chaosGetRefused }, chaosGetRefused);
      if (call.resource === "podchaos" && call.verb === "get") {
        const name = new URL(req.url!, "http://api").pathname.split("/").pop()!;
        const found = chaosObjects.get(name);
        if (found) return json(chaosStatus ? { ...found, status: chaosStatus } : found);
      }
      if (call.resource === "podchaos" && call.verb === "delete") return json({ kind: "Status", status: "Success" });
      json({ kind: "Status", status: "Failure", code: 404 }, 404);
    });
  });
  apiPort = await listen(api);
});

afterAll(() => {
  for (const server of [api, ...pages]) server.close();
});

const config = () => loopbackKubeConfig(apiPort);

describe("the drill runner's Kubernetes client", () => {
  it("picks the ready pods, finds every orchestrator replica, kills with PodChaos — within RUNNER_API_CALLS, with its token", async () => {
    const kube = drillKube(config(), "loopguard");
    expect((await kube.pods("kb-search")).filter((p) => p.ready).map((p) => p.name)).toEqual([
      "kb-search-a",
      "kb-search-b",
    ]);
    expect(await kube.metricsUrls("orchestrator", "http")).toEqual(
      new Map([
        ["orchestrator-a", `http://127.0.0.1:${pagePorts[0]}/metrics`],
        ["orchestrator-b", `http://127.0.0.1:${pagePorts[1]}/metrics`],
      ]),
    );
    const options = parseDrillArgs(["kill-tool", "--tool", "kb-search", "--k8s"], {
      tools: ["kb-search"],
      orchestrator: "orchestrator",
      methodsOf: () => [],
    });
    const [chaos] = podChaosPlan(options, "kill-tool-kb-search-x", "loopguard");
    await kube.createPodChaos(chaos!);
    chaosStatus = { experiment: { containerRecords: [{ id: "loopguard/kb-search-b", injectedCount: 1 }] } };
    expect(await kube.podChaosKilled(chaos!.metadata.name)).toEqual(["kb-search-b"]);
    chaosStatus = undefined;
    expect(await kube.podChaosKilled(chaos!.metadata.name)).toEqual([]);
    await kube.deletePodChaos(chaos!.metadata.name);

    expect(calls.map((c) => c.selector).slice(0, 2)).toEqual([
      "app.kubernetes.io/name=kb-search",
      "kubernetes.io/service-name=orchestrator",
    ]);
    expect(calls.find((c) => c.verb === "create")?.body).toMatchObject({
      kind: "PodChaos",
      spec: { action: "pod-kill", mode: "all" },
    });
    for (const call of calls) expect(call.auth).toBe(`Bearer ${RUNNER_TOKEN}`);
    const made = calls.map(({ group, resource, verb }) => ({ group, resource, verb }));
    // Every call is declared, and every declared call is one the runner makes: the list (and so the Role) is exact.
    for (const call of made) expect(RUNNER_API_CALLS).toContainEqual(call);
    // The Lease's calls are drill-lease.test.ts's.
    for (const declared of RUNNER_API_CALLS.filter((c) => c.resource !== "leases"))
      expect(made).toContainEqual(declared);
  });

  describe("a kill", () => {
    /** The run's kill step against the fake API: one PodChaos of `mode` for kb-search. */
    const kill = (mode: "one" | "all"): Promise<{ line?: string; error?: Error; created: readonly string[] }> => {
      const options = parseDrillArgs(["kill-tool", "--tool", "kb-search", "--kill", mode, "--k8s"], {
        tools: ["kb-search"],
        orchestrator: "orchestrator",
        methodsOf: () => [],
      });
      const plan = podChaosPlan(options, `kill-tool-kb-search-${mode}`, "loopguard");
      const kills = podChaosKills(drillKube(config(), "loopguard"), plan, { timeoutMs: 600, pollMs: 50 });
      return kills.kill().then(
        (line) => ({ line, created: kills.created }),
        (error: Error) => ({ error, created: kills.created }),
      );
    };
    const nameOf = (o: object) => (o as { metadata: { name: string } }).metadata.name;
    const without = (names: string[]) => (p: object[]) => p.filter((o) => !names.includes(nameOf(o)));
    /** An autoscaler's new pod, made just after the runner listed the pods. */
    const scaleUp = (p: object[]) => [...p, pod("kb-search-f", true)];
    /** Chaos Mesh's status on a one-shot pod-kill (as chaos-mesh api/v1alpha1 writes it): the pod it selected, killed or not. */
    const statusOf = (pod: string, injectedCount: number) => ({
      experiment: {
        desiredPhase: "Stop",
        containerRecords: [
          { id: `loopguard/${pod}`, selectorKey: ".", phase: "Not Injected", injectedCount, recoveredCount: 0 },
        ],
      },
    });

    beforeEach(() => {
      afterList = [];
      chaosStatus = undefined;
      chaosGetRefused = undefined;
    });

    it("counts once the pod is seen dead: deleted and replaced under another name, or its container restarted", async () => {
      pods = PODS;
      chaosMesh = (p) => [...without(["kb-search-b"])(p), pod("kb-search-e", false)];
      expect(await kill("one")).toEqual({
        line: "PodChaos drill-kill-tool-kb-search-one-1: pod-kill of one kb-search pod (2 ready); seen dead: kb-search-b",
        created: ["drill-kill-tool-kb-search-one-1"],
      });
      pods = PODS;
      chaosMesh = (p) => [...without(["kb-search-a"])(p), pod("kb-search-a", false, false, 1)];
      expect((await kill("one")).line).toMatch(/; seen dead: kb-search-a$/);
      pods = PODS;
      chaosMesh = (p) => p.map((o) => pod(nameOf(o), false, true));
      expect((await kill("all")).line).toBe(
        "PodChaos drill-kill-tool-kb-search-all-1: pod-kill of every kb-search pod (2 ready); seen dead: kb-search-a, kb-search-b, kb-search-c",
      );
    });

    it("fails the drill when the PodChaos kills nothing (no Chaos Mesh controller acts on it), and still names it for removal", async () => {
      pods = PODS;
      chaosMesh = (p) => p;
      const { error, created } = await kill("one");
      expect(error).toBeInstanceOf(DrillError);
      expect(error!.message).toBe(
        "PodChaos drill-kill-tool-kb-search-one-1 was created but none of the 3 kb-search pods died within 0.6 s " +
          "(kb-search-a, kb-search-b, kb-search-c kept their uid and restart count, and its status records no kill of them): the kill did not happen, so the drill has nothing to report. " +
          "Is Chaos Mesh's controller running, and does it act in namespace loopguard? `kubectl -n loopguard describe podchaos drill-kill-tool-kb-search-one-1` says why",
      );
      expect(created).toEqual(["drill-kill-tool-kb-search-one-1"]);
      // Nor does a pod made after the list count while it lives, or a record of a kill Chaos Mesh could not make.
      pods = PODS;
      afterList = [scaleUp];
      chaosStatus = statusOf("kb-search-f", 0);
      expect((await kill("one")).error?.message).toMatch(
        /^PodChaos drill-kill-tool-kb-search-one-1 was created but none of the 4 kb-search pods died within 0\.6 s \(kb-search-a, kb-search-b, kb-search-c, kb-search-f kept/,
      );
    });

    it("counts a kill of one pod made after the runner listed them, named by the PodChaos's status (a scale-up during the kill)", async () => {
      pods = PODS;
      afterList = [scaleUp];
      // Chaos Mesh picks the new pod and kills it before the runner's first look; its replacement comes.
      chaosMesh = (p) => [...without(["kb-search-f"])(p), pod("kb-search-g", false)];
      chaosStatus = statusOf("kb-search-f", 1);
      expect(await kill("one")).toEqual({
        line: "PodChaos drill-kill-tool-kb-search-one-1: pod-kill of one kb-search pod (2 ready); killed per its status: kb-search-f",
        created: ["drill-kill-tool-kb-search-one-1"],
      });
    });

    it("counts a kill of one pod made after the runner listed them, seen alive then gone, when the status names none", async () => {
      pods = PODS;
      chaosMesh = (p) => p;
      // The new pod is in the runner's first look after the PodChaos, and gone from the next.
      afterList = [scaleUp, (p) => [...without(["kb-search-f"])(p), pod("kb-search-g", false)]];
      expect(await kill("one")).toMatchObject({ line: expect.stringMatching(/; seen dead: kb-search-f$/) });
      pods = PODS;
      afterList = [scaleUp, (p) => p.map((o) => (nameOf(o) === "kb-search-f" ? pod("kb-search-f", false, true) : o))];
      expect(await kill("one")).toMatchObject({ line: expect.stringMatching(/; seen dead: kb-search-f$/) });
    });

    it("counts kills by re-listing pods when the runner's Role may not read PodChaos (rendered by an older release), asking once a drill and saying so", async () => {
      pods = PODS;
      chaosGetRefused = 403;
      chaosMesh = (p) => [...without(["kb-search-b"])(p), pod("kb-search-e", false)];
      const options = parseDrillArgs(["kill-tool", "--tool", "kb-search", "--kill", "one", "--k8s"], {
        tools: ["kb-search"],
        orchestrator: "orchestrator",
        methodsOf: () => [],
      });
      const plan = ["x", "y"].flatMap((run) => podChaosPlan(options, `kill-tool-kb-search-${run}`, "loopguard"));
      const kills = podChaosKills(drillKube(config(), "loopguard"), plan, { timeoutMs: 600, pollMs: 50 });
      const asked = calls.length;
      expect(await kills.kill()).toMatch(/; seen dead: kb-search-b$/);
      pods = PODS;
      expect(await kills.kill()).toMatch(/^PodChaos drill-kill-tool-kb-search-y-1: .*; seen dead: kb-search-b$/);
      expect(calls.slice(asked).filter((c) => c.resource === "podchaos" && c.verb === "get")).toHaveLength(1);
      expect(kills.notes).toEqual(["the runner's Role cannot read PodChaos status; counted kills by re-listing pods"]);
    });

    it("reads a PodChaos gone (404) as naming no kill, and still fails the drill on any other answer than 403 or 404", async () => {
      pods = PODS;
      chaosGetRefused = 404;
      chaosMesh = (p) => [...without(["kb-search-b"])(p), pod("kb-search-e", false)];
      expect((await kill("one")).line).toMatch(/; seen dead: kb-search-b$/);
      pods = PODS;
      chaosGetRefused = 500;
      expect((await kill("one")).error?.message).toMatch(/HTTP-Code: 500/);
    });

    it("fails the drill when a kill of every pod leaves one alive", async () => {
      pods = PODS;
      chaosMesh = without(["kb-search-a", "kb-search-c"]);
      const { error } = await kill("all");
      expect(error).toBeInstanceOf(DrillError);
      expect(error!.message).toMatch(
        /^PodChaos drill-kill-tool-kb-search-all-1 was created but 1 of the 3 kb-search pods did not die within 0\.6 s \(kb-search-b kept/,
      );
    });
  });

  it("sums every replica's page into the report's figures, and keeps a killed replica's last page", async () => {
    const kube = drillKube(config(), "loopguard");
    const sampler = new MetricsSampler(podPages(() => kube.metricsUrls("orchestrator", "http")));
    const first = await sampler.sample();
    replicas[0]!.calls.inc({ tool: "kb-search", method: "Search", outcome: "ok", grpc_code: "OK" }, 5);
    replicas[1]!.calls.inc(
      { tool: "kb-search", method: "Search", outcome: "fallback_cache", grpc_code: "UNAVAILABLE" },
      3,
    );
    replicas[1]!.handled.inc(
      { grpc_service: "loopguard.kb.v1.KbSearchService", grpc_method: "Search", grpc_code: "UNAVAILABLE" },
      7,
    );
    const second = await sampler.sample();
    expect(toolCallFigures(first, second, "kb-search", "loopguard.kb.v1.KbSearchService")).toEqual({
      offered: 8,
      attempts: 7,
      fallbacks: 3,
      failed: 0,
      failures: {},
    });

    // Replica b dies: its page stops answering, and what it had said stands.
    await new Promise((done) => pages[1]!.close(done));
    pages[1]!.closeAllConnections();
    replicas[0]!.calls.inc({ tool: "kb-search", method: "Search", outcome: "ok", grpc_code: "OK" }, 2);
    const third = await sampler.sample();
    expect(toolCallFigures(first, third, "kb-search", "loopguard.kb.v1.KbSearchService").offered).toBe(10);
    expect([...third.pages.keys()].sort()).toEqual(["orchestrator-a", "orchestrator-b"]);
  });
});

describe.skipIf(!findExecutable("prometheus"))("the drill runner's figures through a real Prometheus", () => {
  it("sums every replica's series, split by the pod label prometheus-operator adds", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-drill-prometheus-"));
    const own = [replica(20, 22), replica(5, 9)];
    const servers = own.map((r) => createServer(async (_, res) => res.end(await r.registry.metrics())));
    let prometheus: ChildProcess | undefined;
    try {
      const ports = await Promise.all(servers.map(listen));
      const probe = createServer();
      const promPort = await listen(probe);
      await new Promise((done) => probe.close(done));
      // As a ServiceMonitor's scrape labels them: job after the Service, the namespace, each pod.
      const scrape = ports.map((port, i) => ({
        targets: [`127.0.0.1:${port}`],
        labels: { job: "orchestrator", namespace: "loopguard", pod: `orchestrator-${i}` },
      }));
      writeFileSync(
        join(dir, "prometheus.yml"),
        toYaml({
          global: { scrape_interval: "1s" },
          scrape_configs: [{ job_name: "orchestrator", static_configs: scrape }],
        }),
      );
      prometheus = spawn(
        findExecutable("prometheus")!,
        [
          `--config.file=${join(dir, "prometheus.yml")}`,
          `--storage.tsdb.path=${join(dir, "tsdb")}`,
          `--web.listen-address=127.0.0.1:${promPort}`,
          "--log.level=warn",
        ],
        { stdio: "ignore" },
      );
      const read = prometheusPages(`http://127.0.0.1:${promPort}`, "loopguard", "orchestrator");
      const deadline = Date.now() + 20_000;
      let pages: ReadonlyMap<string, readonly unknown[]> = new Map();
      while (pages.size < 2 && Date.now() < deadline) {
        pages = await read().catch(() => new Map());
        await sleep(250);
      }
      expect([...pages.keys()].sort()).toEqual(["orchestrator-0", "orchestrator-1"]);
      const sampler = new MetricsSampler(read);
      const snapshot = await sampler.sample();
      const empty = { at: 0, pages: new Map() };
      expect(toolCallFigures(empty, snapshot, "kb-search", "loopguard.kb.v1.KbSearchService")).toMatchObject({
        offered: 25,
        attempts: 31,
      });
    } finally {
      prometheus?.kill("SIGKILL");
      for (const server of servers) server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 40_000);
});
