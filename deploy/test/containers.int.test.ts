// The suite from its images, as `pnpm containers` runs it: real containers on the host network,
// one loopback address per pod, the cluster DNS, real signals. The images are built first (the
// build cache makes that quick once `pnpm images` or `.ci/run` has built them). The orchestrator's
// first replica holds 127.0.0.1:50051 and :8080, so these tests fail if `pnpm start` is running.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { localPersonToken, metricValue } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runProcess } from "./run-process.js";
import { docker, root, suiteProcesses } from "./suite-processes.js";

const { dataDir, run, state } = suiteProcesses("loopguard-containers-");
const containersMain = join(root, "deploy", "dist", "local", "containers-main.js");
const containers = (...args: string[]) => run(containersMain, args);
const cli = (...args: string[]) =>
  run(join(root, "services", "orchestrator", "dist", "cli", "loopguard.js"), args, 60_000);

const podsOf = (service: string) =>
  state()
    .pods.filter((p) => p.service === service)
    .sort((a, b) => a.index - b.index);
/** A token of one of the suite's local people (as the CLI signs), for one service: sessions are the requester's, the rest the operator's. */
const token = (audience: string, scopes: string[]) =>
  localPersonToken(dataDir, audience === "orchestrator" ? "requester" : "operator", audience, scopes);

async function orchestratorApi() {
  return createRawClient(OrchestratorService, "127.0.0.1:50051", {
    token: await token("orchestrator", ["sessions:read", "sessions:write", "grant:kb:read"]),
  });
}

const TERMINAL = new Set([SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED]);

/** Starts a question session through the orchestrator and waits for its end; true when it is DONE. */
async function questionSession(api: Awaited<ReturnType<typeof orchestratorApi>>): Promise<boolean> {
  const { session } = await api.startSession(
    { goal: "How long do card refunds take?", scopes: ["kb:read"], policy: "scripted" },
    { deadline: 10_000 },
  );
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { session: now } = await api.getSession({ sessionId: session!.sessionId }, { deadline: 5000 });
    if (TERMINAL.has(now!.state)) return now!.state === SessionState.DONE;
    if (Date.now() > deadline) return false;
    await sleep(25);
  }
}

async function searchesServed(address: string): Promise<number> {
  const page = await (await fetch(`http://${address}:9461/metrics`)).text();
  return metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" });
}

beforeAll(async () => {
  const images = await run(join(root, "deploy", "dist", "local", "images-main.js"), [], 1_500_000);
  if (images.code !== 0)
    throw new Error(`the containers tests need the images, and \`pnpm images\` failed:\n${images.stderr}`);
  const up = await containers("up");
  expect(up.stderr).toBe("");
  expect(up.code).toBe(0);
  // The migration step ran in a one-off container of each stateful service's image, on its pod's volume, before the pod.
  for (const service of ["billing", "orchestrator", "risk"]) {
    expect(up.stdout).toMatch(
      new RegExp(
        `^${service}: applied \\d+ migration\\(s\\) to sqlite:/data/${service}\\.db in .* \\(loopguard-${service}-0-data, `,
        "m",
      ),
    );
    expect(up.stdout.indexOf(`${service}: applied`)).toBeLessThan(up.stdout.indexOf(`${service}-0 is SERVING`));
  }
}, 1_800_000);

afterAll(async () => {
  await containers("down");
  rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

describe("pnpm containers", () => {
  it("runs one pod per service, each SERVING on its own loopback address, and prints them", async () => {
    const status = await containers("status");
    for (const pod of state().pods) expect(status.stdout).toContain(`${`${pod.name}`.padEnd(16)} ${pod.address}`);
    expect(podsOf("orchestrator")[0]?.address).toBe("127.0.0.1");
    const addresses = state().pods.map((p) => p.address);
    expect(new Set(addresses).size).toBe(addresses.length);
    for (const pod of state().pods) {
      const inspect = JSON.parse(await docker(["container", "inspect", pod.container])) as [
        { HostConfig: { ReadonlyRootfs: boolean; NetworkMode: string }; Config: { User: string } },
      ];
      expect(inspect[0].HostConfig.ReadonlyRootfs).toBe(true);
      expect(inspect[0].HostConfig.NetworkMode).toBe("host");
      expect(inspect[0].Config.User).toBe("10001:10001");
    }
  });

  it("lets no drill run beside it: `pnpm drill` refuses with one line and exit 1, and starts nothing", async () => {
    const labelled = () =>
      docker(["ps", "--all", "--format", "{{.Names}}", "--filter", "label=io.loopguard.containers"]);
    const before = await labelled();
    const drill = join(root, "deploy", "dist", "ops", "drills", "main.js");
    const refused = await run(drill, ["kill-tool", "--tool", "kb-search"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `drill: a loopguard container suite is already up (its data in ${dataDir}): remove it first with \`LOOPGUARD_DATA_DIR=${dataDir} pnpm containers down\`\n`,
    );
    expect(await labelled()).toBe(before);
  });

  it("lets no second suite start beside it: `pnpm containers up` with another data folder refuses with one line and starts nothing", async () => {
    const labelled = () =>
      docker(["ps", "--all", "--format", "{{.ID}} {{.Names}} {{.State}}", "--filter", "label=io.loopguard.containers"]);
    const before = await labelled();
    const other = mkdtempSync(join(tmpdir(), "loopguard-containers-other-"));
    try {
      const refused = await runProcess(process.execPath, [containersMain, "up"], {
        env: { ...process.env, LOOPGUARD_DATA_DIR: other },
        cwd: root,
        timeoutMs: 60_000,
      });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toBe(
        `containers: a loopguard container suite is already up (its data in ${dataDir}): remove it first with \`LOOPGUARD_DATA_DIR=${dataDir} pnpm containers down\`\n`,
      );
      expect(existsSync(join(other, "containers"))).toBe(false);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
    // The cluster DNS is still this suite's, answering its names.
    expect(
      await docker([
        "inspect",
        "--format",
        '{{index .Config.Labels "io.loopguard.containers"}}',
        "loopguard-cluster-dns",
      ]),
    ).toBe(join(dataDir, "containers"));
    expect(await labelled()).toBe(before);
  });

  it("runs the README's demo refund to DONE through the containers, with the CLI unchanged", async () => {
    const result = await cli(
      "run",
      "Refund 5.00 USD of order ord_DEMO00000001: it arrived damaged",
      "--task-file",
      join(root, "examples", "refund-task.json"),
      "--wait",
      "--json",
    );
    expect(result.stderr).toBe("");
    const session = JSON.parse(result.stdout) as { state: string; stop_reason: string; answer: string };
    expect(session.state).toBe("DONE");
    expect(session.stop_reason).toBe("done");
    expect(session.answer).toMatch(/refund/i);
    // Its steps went to the orchestrator pod's rotated trace files (steps.<UTC day>.<n>.jsonl).
    const [orchestrator] = podsOf("orchestrator");
    const files = await docker([
      "exec",
      orchestrator!.container,
      "node",
      "-e",
      "console.log(require('fs').readdirSync('/data/traces').join('\\n'))",
    ]);
    expect(files.split("\n")).toContainEqual(expect.stringMatching(/^steps\.\d{4}-\d{2}-\d{2}\.\d+\.jsonl$/));
  }, 60_000);

  it("refuses replicas that would split a service's state, and bad arguments, with one line", async () => {
    const billing = await containers("up", "--replicas", "billing=2");
    expect(billing.code).toBe(1);
    expect(billing.stderr).toMatch(
      /^containers: billing runs on SQLite in its pod; 2 replicas need PostgreSQL: `pnpm containers down`.*\n$/,
    );
    const orchestrator = await containers("up", "--replicas", "orchestrator=2");
    expect(orchestrator.code).toBe(1);
    expect(orchestrator.stderr).toMatch(
      /^containers: orchestrator runs on SQLite in its pod; 2 replicas need PostgreSQL: `pnpm containers down`.*\n$/,
    );
    const bad = await containers("up", "--replicas", "kb-search=three");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('containers: --replicas takes SERVICE=N (e.g. kb-search=3), got "kb-search=three"\n');
    const unknown = await containers("up", "--replicas", "search=2");
    expect(unknown.stderr).toMatch(/^containers: unknown service "search"/);
    expect(podsOf("billing")).toHaveLength(1);
  }, 120_000);

  it("docker stop (SIGTERM) drains the call in flight and the container exits 0; up starts it again", async () => {
    const [pod] = podsOf("kb-search");
    const address = `${pod!.address}:50061`;
    const admin = createRawClient(ToolAdminService, address, { token: await token("kb-search", ["tool:admin"]) });
    const kb = createRawClient(KbSearchService, address, { token: await token("kb-search", ["kb:read"]) });
    try {
      await admin.setFaults({ profile: { addedLatencyMs: 1500 } });
      const inFlight = kb.search({ query: "refund", limit: 1 }, { deadline: 10_000 });
      await sleep(300);
      const stopped = docker(["stop", "--time", "15", pod!.container]);
      expect((await inFlight).hits.length).toBeGreaterThan(0);
      await stopped;
    } finally {
      admin.close();
      kb.close();
    }
    expect(await docker(["container", "inspect", "--format", "{{.State.Status}}", pod!.container])).toBe("exited");
    expect(await docker(["container", "inspect", "--format", "{{.State.ExitCode}}", pod!.container])).toBe("0");
    const logs = await docker(["logs", pod!.container]);
    expect(logs).toMatch(/^(?=.*"msg":"draining")(?=.*"in_flight":1\b).*$/m);
    expect(logs).toContain('"msg":"stopped"');

    const up = await containers("up");
    expect(up.code).toBe(0);
    expect(await docker(["container", "inspect", "--format", "{{.State.Status}}", pod!.container])).toBe("running");
  }, 120_000);

  it("scales kb-search 1 → 3 under load: each replica serves ≥ 20% of searches within 60 s, no session fails", async () => {
    const api = await orchestratorApi();
    let stop = false;
    const outcomes = { done: 0, failed: 0 };
    const worker = async () => {
      while (!stop) {
        if (await questionSession(api).catch(() => false)) outcomes.done += 1;
        else outcomes.failed += 1;
        await sleep(20);
      }
    };
    const workers = Array.from({ length: 6 }, worker);
    try {
      await sleep(3000);
      const scaled = await containers("up", "--replicas", "kb-search=3");
      expect(scaled.stderr).toBe("");
      expect(scaled.code).toBe(0);
      const servingAt = Date.now();
      const replicas = podsOf("kb-search");
      expect(replicas).toHaveLength(3);

      const samples: { at: number; served: number[] }[] = [];
      let spread: { afterMs: number; shares: number[] } | undefined;
      while (!spread && Date.now() - servingAt <= 60_000) {
        samples.push({ at: Date.now(), served: await Promise.all(replicas.map((p) => searchesServed(p.address))) });
        const last = samples.at(-1)!;
        const first = samples.find((s) => last.at - s.at <= 10_000 && last.at - s.at >= 9_000);
        if (first) {
          const counts = last.served.map((n, i) => n - first.served[i]!);
          const total = counts.reduce((a, b) => a + b, 0);
          if (total > 0 && counts.every((n) => n / total >= 0.2))
            spread = { afterMs: last.at - servingAt, shares: counts.map((n) => n / total) };
        }
        await sleep(1000);
      }
      const percent = (shares: number[]) => shares.map((s) => `${(s * 100).toFixed(0)}%`).join(" / ");
      console.info(
        `[containers scale-out] ${spread ? `every replica ≥ 20% over the 10 s window ending ${(spread.afterMs / 1000).toFixed(1)} s after the new replicas were SERVING; shares ${percent(spread.shares)}` : "no spread within 60 s"}`,
      );
      expect(spread).toBeDefined();
      const from = await Promise.all(replicas.map((p) => searchesServed(p.address)));
      await sleep(10_000);
      const counts = (await Promise.all(replicas.map((p) => searchesServed(p.address)))).map((n, i) => n - from[i]!);
      const total = counts.reduce((a, b) => a + b, 0);
      console.info(
        `[containers scale-out] the next 10 s: ${total} searches, shares ${percent(counts.map((n) => n / total))}`,
      );
    } finally {
      stop = true;
      await Promise.all(workers);
      api.close();
    }
    console.info(`[containers scale-out] sessions: ${outcomes.done} done, ${outcomes.failed} failed`);
    expect(outcomes.done).toBeGreaterThan(100);
    expect(outcomes.failed).toBe(0);
  }, 180_000);

  it("scales back down: surplus replicas leave DNS, drain and are removed", async () => {
    const before = podsOf("kb-search");
    const down = await containers("up", "--replicas", "kb-search=1");
    expect(down.code).toBe(0);
    expect(podsOf("kb-search").map((p) => p.name)).toEqual(["kb-search-0"]);
    for (const pod of before.slice(1)) {
      await expect(docker(["container", "inspect", pod.container])).rejects.toThrow();
    }
  }, 120_000);

  it("runs two orchestrators and two billing replicas on a PostgreSQL it starts; down removes everything and a second down has nothing to do", async () => {
    expect((await containers("down")).code).toBe(0);
    const up = await containers("up", "--replicas", "orchestrator=2", "--replicas", "billing=2");
    expect(up.stderr).toBe("");
    expect(up.stdout).toMatch(/PostgreSQL 127\.0\.0\.8:5432 for .*orchestrator/);
    expect(podsOf("billing")).toHaveLength(2);
    const billingEnv = JSON.parse(
      await docker(["container", "inspect", "--format", "{{json .Config.Env}}", podsOf("billing")[1]!.container]),
    ) as string[];
    expect(billingEnv).toContain("BILLING_STORE=postgres://postgres@postgres.loopguard.svc.cluster.local:5432/billing");
    expect(podsOf("orchestrator").map((p) => p.address)).toEqual([
      "127.0.0.1",
      expect.stringMatching(/^127\.0\.0\.\d+$/),
    ]);
    const env = JSON.parse(
      await docker(["container", "inspect", "--format", "{{json .Config.Env}}", podsOf("orchestrator")[1]!.container]),
    ) as string[];
    expect(env).toContain(
      "ORCHESTRATOR_STORE=postgres://postgres@postgres.loopguard.svc.cluster.local:5432/orchestrator",
    );
    const api = await orchestratorApi();
    try {
      expect(await questionSession(api)).toBe(true);
    } finally {
      api.close();
    }
    // A refund through the two billing replicas, recorded once in their shared ledger.
    const refund = await cli(
      "run",
      "Refund 1.00 USD of order ord_DEMO00000001",
      "--task-file",
      join(root, "examples", "refund-task.json"),
      "--wait",
      "--json",
    );
    expect(JSON.parse(refund.stdout)).toMatchObject({ state: "DONE", stop_reason: "done" });

    const label = `label=io.loopguard.containers=${join(dataDir, "containers")}`;
    const down = await containers("down");
    expect(down.code).toBe(0);
    expect(await docker(["ps", "--all", "--quiet", "--filter", label])).toBe("");
    expect(await docker(["volume", "ls", "--quiet", "--filter", label])).toBe("");
    const again = await containers("down");
    expect(again).toEqual({ code: 0, stdout: "nothing is up\n", stderr: "" });
  }, 240_000);
});
