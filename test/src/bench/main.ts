// `pnpm bench [tool|client|steps|pg|refunds|redact|hedge|auth|tokens|live|all]`: side-by-side benchmarks on
// loopback, printed as figures and ratios to a bare grpc-js baseline measured in the same run (live: what
// 10,000 waiting sessions hold and spend). Bounded in time; stops by itself.
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { createRawClient, CallError, toolClient } from "@loopguard/tool-sdk";
import { Registry } from "prom-client";
import { startBenchServer } from "./bench-server.js";
import { benchAuth } from "./auth.js";
import { benchHedge } from "./hedge.js";
import { benchLive } from "./live.js";
import { compare, type ProbedFigures, printComparison } from "./measure.js";
import { benchPeople } from "./people.js";
import { benchPgScale } from "./pg-scale.js";
import { benchRedact } from "./redact.js";
import { benchRefunds } from "./refunds.js";
import { benchSteps } from "./steps.js";
import { benchTokens } from "./tokens.js";

const durationMs = Number(process.env.BENCH_DURATION_MS ?? 3000);
const request = { query: "how do refunds work", limit: 3 };

async function benchTool(): Promise<void> {
  const bare = await startBenchServer("bare");
  const tool = await startBenchServer("tool");
  const token = await benchPeople().token("operator", ["kb:read"]);
  const bareClient = createRawClient(KbSearchService, bare.address, { token });
  const toolClientRaw = createRawClient(KbSearchService, tool.address, { token });
  try {
    for (const inFlight of [1, 64]) {
      const [baseline, subject] = (await compare(inFlight, 2 * durationMs, [
        { label: "bare grpc-js server", call: () => bareClient.search(request) },
        { label: "serveTool", call: () => toolClientRaw.search(request) },
      ])) as [ProbedFigures, ProbedFigures];
      printComparison(
        `tool: server side, same client (raw grpc-js + protobuf-es, bearer token sent to both)`,
        baseline,
        subject,
      );
    }
  } finally {
    bareClient.close();
    toolClientRaw.close();
    bare.stop();
    tool.stop();
  }
}

async function benchClient(): Promise<void> {
  const server = await startBenchServer("bare");
  const token = await benchPeople().token("operator", ["kb:read"]);
  const bare = createRawClient(KbSearchService, server.address, { token });
  const client = toolClient(KbSearchService, { target: server.address, token, registry: new Registry() });
  try {
    for (const inFlight of [1, 64]) {
      // toolClient always sends a deadline (the contract's SLA timeout); grpc-js pays for deadline
      // timers on both sides, so the same bare client with the same deadline is shown too.
      const [baseline, withDeadline, subject] = (await compare(inFlight, 3 * durationMs, [
        { label: "bare grpc-js client", call: () => bare.search(request) },
        { label: "bare client + 1 s deadline", call: () => bare.search(request, { deadline: 1000 }) },
        { label: "toolClient", call: () => client.call("search", request) },
      ])) as [ProbedFigures, ProbedFigures, ProbedFigures];
      printComparison("client: calling side, same bare server (token sent by both)", baseline, subject);
      console.log(
        `  ${withDeadline.label.padEnd(28)} ${String(inFlight).padStart(3)} in flight  ${withDeadline.perSecond.toFixed(0).padStart(7)} calls/s  ratio toolClient / this ${(subject.perSecond / withDeadline.perSecond).toFixed(2)}\n`,
      );
    }
  } finally {
    bare.close();
    client.close();
    server.stop();
  }

  // Fast-fail latency with the breaker open: risk has no empty fallback, so the call is refused.
  const down = await startBenchServer("risk-down");
  const riskToken = await benchPeople().token("operator", ["risk:read"]);
  const risk = toolClient(RiskService, {
    target: down.address,
    token: riskToken,
    registry: new Registry(),
    breaker: { volumeThreshold: 5, resetTimeoutMs: 60_000 },
    retry: { maxAttempts: 1 },
  });
  const req = { idCard: "11010519491231002X", phone: "+8613800138000" };
  try {
    while (risk.breakerState !== "open") await risk.call("queryRisk", req).catch(() => undefined);
    const n = 20_000;
    const started = performance.now();
    let refused = 0;
    for (let i = 0; i < n; i += 1) {
      await risk.call("queryRisk", req).catch((e: unknown) => {
        if (e instanceof CallError && e.reason === "BREAKER_OPEN") refused += 1;
      });
    }
    const perCallMs = (performance.now() - started) / n;
    console.log(
      `client: open-breaker fast fail  ${perCallMs.toFixed(4)} ms per call over ${n} calls (${refused} refused with BREAKER_OPEN)\n`,
    );
  } finally {
    risk.close();
    down.stop();
  }
}

const suites: Record<string, () => Promise<void>> = {
  tool: benchTool,
  client: benchClient,
  steps: () => benchSteps(durationMs),
  pg: () => benchPgScale(durationMs),
  refunds: () => benchRefunds(durationMs),
  redact: async () => benchRedact(durationMs),
  hedge: benchHedge,
  auth: benchAuth,
  tokens: async () => benchTokens(process.argv.slice(2).filter((a) => a.endsWith(".jsonl"))),
  live: benchLive,
};
const names = process.argv.slice(2).filter((a) => a !== "--" && !a.endsWith(".jsonl"));
const chosen = names.length === 0 || names.includes("all") ? Object.keys(suites) : names;
for (const name of chosen) {
  const suite = suites[name];
  if (!suite) {
    console.error(`unknown benchmark "${name}"; choose from: ${Object.keys(suites).join(", ")}, all`);
    process.exit(2);
  }
  await suite();
}
process.exit(0);
