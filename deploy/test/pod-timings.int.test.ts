// The pods' probes and termination grace, checked against what the services really take. Each
// service starts as a real process; the CPU it spends until it serves, run at the pod's CPU
// request (what a busy node guarantees), is the longest a start may take, and the startup probe
// must allow twice that. A SIGTERM while a span waits for a collector that never answers must end
// within the time the grace leaves after the preStop and the drain. Needs `pnpm build` first.
import { readFileSync } from "node:fs";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { createRawClient, discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import { spawnTool, type ToolProcess, testOrchestratorEnv, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cpuRequestCores,
  POD_TIMINGS,
  PRE_STOP_SECONDS,
  SHUTDOWN_GRACE_MS,
  startupBudgetSeconds,
  TERMINATION_GRACE_SECONDS,
} from "../src/manifests/pod-timings.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";
import { root } from "./suite-processes.js";

const services = discoverServices(join(root, "services"));
const tools = services.filter((s) => s.kind === "tool");
/** Settings a service cannot start without (its secret files are the test keys). */
const REQUIRED: Record<string, Record<string, string>> = {
  risk: { RISK_CUSTOMER_KEY_PEPPER: "pod-timings-risk-customer-key-pepper-0123456789" },
};

/** The OTEL_* variables every pod gets from the base's loopguard-telemetry ConfigMap. */
function telemetryEnv(): Record<string, string> {
  const [base] = parseYamlDocuments(
    readFileSync(join(root, "deploy", "k8s", "base", "kustomization.yaml"), "utf8"),
    "base",
  ) as {
    configMapGenerator: { name: string; literals: string[] }[];
  }[];
  const literals = base!.configMapGenerator.find((g) => g.name === "loopguard-telemetry")!.literals;
  return Object.fromEntries(literals.map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
}

/** CPU seconds (user + system) the process has used, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  // utime and stime are fields 14 and 15 of the line, in clock ticks (100 per second on Linux).
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** A collector that accepts connections and never answers. */
function hungCollector(): Promise<{ server: Server; port: number; close(): void }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => sockets.add(socket));
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        server,
        port: (server.address() as { port: number }).port,
        close: () => {
          for (const socket of sockets) socket.destroy();
          server.close();
        },
      }),
    ),
  );
}

describe("pod timings: probes and grace sized from the processes", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-pod-timings-"));
  const started = new Map<string, { process: ToolProcess; cpu: number; wallMs: number }>();
  let collector: Awaited<ReturnType<typeof hungCollector>>;

  const start = async (spec: ServiceSpec, extra: Record<string, string>) => {
    const begun = performance.now();
    const process = await spawnTool(spec.entry, {
      ...telemetryEnv(),
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
      OTEL_SERVICE_NAME: spec.name,
      LOOPGUARD_DATA_DIR: join(dataDir, spec.name),
      [`${spec.envPrefix}_PORT`]: "0",
      [spec.metricsPortEnv]: "0",
      ...REQUIRED[spec.name],
      ...extra,
    });
    started.set(spec.name, { process, cpu: cpuSeconds(process.child.pid!), wallMs: performance.now() - begun });
    return process;
  };

  beforeAll(async () => {
    collector = await hungCollector();
    // One at a time, so one start's CPU is not another's wait.
    for (const tool of tools) await start(tool, {});
    const addresses = Object.fromEntries(
      tools.map((t) => [`${t.envPrefix}_ADDR`, started.get(t.name)!.process.address]),
    );
    for (const orchestrator of services.filter((s) => s.kind === "orchestrator"))
      await start(orchestrator, { ...testOrchestratorEnv(), ...addresses });
  }, 120_000);

  afterAll(() => {
    for (const { process } of started.values()) if (process.child.exitCode === null) process.child.kill("SIGKILL");
    collector?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("every service's start, at its pod's CPU request, fits half its startup probe", () => {
    const rows = services.map((spec) => {
      const { cpu, wallMs } = started.get(spec.name)!;
      const atRequest = cpu / cpuRequestCores(spec);
      process.stdout.write(
        `${spec.name}: serving after ${wallMs.toFixed(0)} ms, ${(cpu * 1000).toFixed(0)} ms of CPU → ${atRequest.toFixed(1)} s at its request\n`,
      );
      return { spec, atRequest };
    });
    // The figure the manifests were sized with may not understate what a start costs here.
    for (const { spec, atRequest } of rows) {
      expect(started.get(spec.name)!.cpu, spec.name).toBeLessThanOrEqual(POD_TIMINGS.startCpuSeconds[spec.kind]);
      expect(2 * atRequest, spec.name).toBeLessThanOrEqual(startupBudgetSeconds(spec));
    }
  });

  it("a SIGTERM with a span waiting for a collector that never answers ends within the grace left after the preStop and the drain", async () => {
    const kb = started.get("kb-search")!.process;
    const client = createRawClient(KbSearchService, kb.address, {
      token: await testToken({ subject: "test", scopes: ["kb:read"] }),
    });
    await client.search({ query: "refund", limit: 1 });
    client.close();
    const begun = performance.now();
    kb.child.kill("SIGTERM");
    expect(await kb.exited).toBe(0);
    const seconds = (performance.now() - begun) / 1000;
    process.stdout.write(`kb-search: exited ${seconds.toFixed(1)} s after SIGTERM with its collector hung\n`);
    expect(seconds).toBeGreaterThan(1);
    expect(seconds).toBeLessThanOrEqual(POD_TIMINGS.flushSeconds);
    expect(PRE_STOP_SECONDS + (2 * SHUTDOWN_GRACE_MS) / 1000 + POD_TIMINGS.flushSeconds).toBeLessThan(
      TERMINATION_GRACE_SECONDS,
    );
  }, 30_000);
});
