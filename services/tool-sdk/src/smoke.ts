// Synthetic checks of a tool ("smoke calls"), as a release sends them to a new version before any
// client reaches it and again once it serves them: the call its contract declares
// (ServicePolicy.smoke_check, a read-only method and a request every deployment answers alike:
// OK, or the expected code, e.g. NOT_FOUND for an id no deployment holds), made `count` times with
// a probe's token that carries that method's scope only. Any other answer is a failed call. Used by `loopguard-smoke` (cli/smoke.ts) and by `pnpm release`.
import { type DescMethod, type DescService, fromJsonString, type Message } from "@bufbuild/protobuf";
import { setTimeout as sleep } from "node:timers/promises";
import { mintToken, type SigningKey } from "./auth.js";
import { Effect, methodPolicy, servicePolicy } from "./contract.js";
import { status } from "./errors.js";
import { CallError } from "./client/call-error.js";
import { createRawClient, type RawCallOptions } from "./raw-client.js";
import { violationsOf } from "./validation.js";

/** The smoke call of one tool, read from its contract. */
export interface SmokeCall {
  readonly tool: string;
  readonly service: DescService;
  readonly method: DescMethod;
  readonly request: Message;
  /** The status every deployment answers the call with (status.OK unless the contract names one). */
  readonly expectCode: status;
  /** The one scope the probe's token carries: the method's. */
  readonly scope: string;
  /** The method's SLA error-rate budget: the share of smoke calls that may fail. */
  readonly errorRateBudget: number;
  readonly timeoutMs: number;
}

/** The tool's smoke call; throws an Error naming what its contract gets wrong (so `pnpm gen` and the tests catch it). */
export function smokeCallOf(service: DescService): SmokeCall {
  const { toolName, smokeCheck } = servicePolicy(service);
  const where = `${service.typeName} option (loopguard.tool.v1.service).smoke_check`;
  if (!smokeCheck?.method)
    throw new Error(`${where} is missing: a release cannot judge ${toolName} without a call to send it`);
  const method = service.methods.find((m) => m.name === smokeCheck.method);
  if (!method) throw new Error(`${where} names ${smokeCheck.method}, not a method of the service`);
  const policy = methodPolicy(method);
  if (method.methodKind !== "unary" || policy.effect !== Effect.READ_ONLY)
    throw new Error(`${where} names ${method.name}, which is not a read-only unary method`);
  let request: Message;
  try {
    request = fromJsonString(method.input, smokeCheck.requestJson);
  } catch (error) {
    throw new Error(`${where}: request_json is not a ${method.input.typeName}: ${(error as Error).message}`);
  }
  const violations = violationsOf(method.input, request as never);
  if (violations.length > 0)
    throw new Error(
      `${where}: request_json breaks its contract: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
    );
  const expectCode =
    smokeCheck.expectCode === ""
      ? status.OK
      : (status as unknown as Record<string, number | undefined>)[smokeCheck.expectCode];
  if (typeof expectCode !== "number")
    throw new Error(`${where}: expect_code "${smokeCheck.expectCode}" is not a gRPC status code name`);
  return {
    tool: toolName,
    service,
    method,
    request,
    expectCode,
    scope: policy.requiredScope,
    errorRateBudget: policy.sla!.errorRateBudget,
    timeoutMs: policy.sla!.timeoutMs,
  };
}

/**
 * The fewest calls of a method a gate judges it on: below 1 / budget calls a single failed call
 * already spends more than the error budget, so fewer calls say nothing about a version.
 */
export function minCallsToJudge(errorRateBudget: number): number {
  return Math.max(MIN_CALLS_FLOOR, Math.ceil(1 / errorRateBudget));
}

/** Even a generous budget is judged on no fewer calls: a p95 needs some to mean anything. */
const MIN_CALLS_FLOOR = 20;

/** How many smoke calls a release sends: twice what the gate needs, so calls a scraper saw only as a counter's first value do not leave it short. */
export function smokeCount(call: SmokeCall): number {
  return 2 * minCallsToJudge(call.errorRateBudget);
}

/** A probe's token for the smoke call: the tool as audience, the method's scope only. */
export function smokeToken(call: SmokeCall, key: SigningKey, subject: string, ttlSeconds: number): Promise<string> {
  return mintToken(key, { subject, audience: call.tool, scopes: call.scope ? [call.scope] : [], ttlSeconds });
}

export interface SmokeOptions {
  /** gRPC targets (host:port, or dns:///name:port balanced round robin over its addresses); call i goes to target i mod n. */
  readonly targets: readonly string[];
  readonly token: string;
  readonly count: number;
  /** Calls in flight at once. */
  readonly concurrency: number;
  /** Spread the calls evenly over this long (so a scraper sees them arrive); 0 sends them as fast as the concurrency allows. */
  readonly spreadMs: number;
}

export interface SmokeResult {
  readonly tool: string;
  readonly method: string;
  readonly calls: number;
  readonly failed: number;
  /** Failed calls by status code name, e.g. { UNAVAILABLE: 121 }. */
  readonly failures: Readonly<Record<string, number>>;
  /** Client-side latency of the answered calls, milliseconds, ascending. */
  readonly latenciesMs: readonly number[];
}

/** Sends the smoke call `count` times and counts the answers. */
export async function runSmoke(call: SmokeCall, options: SmokeOptions): Promise<SmokeResult> {
  const roundRobin = { "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) };
  const clients = options.targets.map((target) =>
    createRawClient(call.service, target, { token: options.token, channelOptions: roundRobin }),
  );
  const send = (i: number) =>
    (
      clients[i % clients.length] as unknown as Record<
        string,
        (request: Message, o: RawCallOptions) => Promise<unknown>
      >
    )[call.method.localName]!;
  const failures: Record<string, number> = {};
  const latencies: number[] = [];
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < options.count; i = next++) {
      const due = started + (options.spreadMs * i) / options.count;
      if (due > performance.now()) await sleep(due - performance.now());
      const sent = performance.now();
      const answered = await send(i)(call.request, { deadline: call.timeoutMs }).then(
        () => status.OK,
        (error: unknown) => (error instanceof CallError ? error.code : status.UNKNOWN),
      );
      const name = status[answered] ?? "UNKNOWN";
      if (answered === call.expectCode) latencies.push(performance.now() - sent);
      else failures[name] = (failures[name] ?? 0) + 1;
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(options.concurrency, options.count) }, worker));
  } finally {
    for (const client of clients) client.close();
  }
  const failed = Object.values(failures).reduce((sum, n) => sum + n, 0);
  return {
    tool: call.tool,
    method: call.method.name,
    calls: options.count,
    failed,
    failures,
    latenciesMs: latencies.sort((a, b) => a - b),
  };
}

/**
 * The most of `calls` that may fail for a version failing at `errorRate` to pass: its expected
 * failures plus three standard deviations, so a version within its budget fails this by chance
 * about once in a thousand runs (a few slow answers on a busy machine are no verdict), while one
 * failing far more often never passes.
 */
export function allowedFailures(calls: number, errorRate: number): number {
  const expected = calls * errorRate;
  return Math.floor(expected + 3 * Math.sqrt(expected * (1 - errorRate)));
}

/** Passes when some call was made and no more failed than a version within `errorRate` would. */
export function smokePassed(result: SmokeResult, errorRate: number): boolean {
  return result.calls > 0 && result.failed <= allowedFailures(result.calls, errorRate);
}

/** One line an operator reads: what was called, how many failed and how, how many may, and the client-side p95. */
export function describeSmoke(result: SmokeResult, errorRate: number): string {
  const failures = Object.entries(result.failures).map(([code, n]) => `${code} × ${n}`);
  const p95 = result.latenciesMs[Math.max(0, Math.ceil(result.latenciesMs.length * 0.95) - 1)];
  const allowed = `${allowedFailures(result.calls, errorRate)} allowed at a ${Number((errorRate * 100).toPrecision(3))} % error rate`;
  return (
    `smoke ${result.tool} ${result.method}: ${result.failed} of ${result.calls} calls failed${failures.length > 0 ? ` (${failures.join(", ")})` : ""}, ${allowed}` +
    (p95 === undefined ? "" : `; p95 ${p95.toFixed(1)} ms`)
  );
}
