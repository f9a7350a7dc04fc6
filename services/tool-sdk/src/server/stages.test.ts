// Each interceptor alone: a ServerCall built by hand, the next stage a plain function.
import { create } from "@bufbuild/protobuf";
import { Metadata } from "@grpc/grpc-js";
import { refusal } from "@loopguard/test-kit";
import { KbSearchService, SearchRequestSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import {
  BillingService,
  RefundReason,
  RefundRequestSchema,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { type Caller, mintToken, newKeyPair, requestDigest, signingKeyFromJwk, TOKEN_ISSUER } from "../auth.js";
import { CallCredentials } from "../call-keys.js";
import { methodPath } from "../contract.js";
import { publicKeySet, withBinding } from "../key-bindings.js";
import { status, ToolError } from "../errors.js";
import { FaultSwitch } from "../faults.js";
import { createLogger } from "../logger.js";
import { ServerMetrics } from "../metrics.js";
import { parseMetrics, samplesOf } from "../prometheus-text.js";
import {
  metricValue,
  SAMPLE_HIT,
  TEST_CALL_SECRETS,
  TEST_ORCHESTRATOR_KEY,
  TEST_PUBLIC_KEYS,
  testCallKeys,
  testToken,
} from "../../testing/index.js";
import { TokenVerifier } from "../token-verifier.js";
import { unaryTerminal } from "./handler.js";
import { type CallFn, compose, type Interceptor, OversizedRequest, type ServerCall } from "./interceptor.js";
import { CallSlots } from "./slots.js";
import { authStage, bindingStage } from "./auth-stages.js";
import * as stages from "./stages.js";

const method = KbSearchService.method.search;

function testCall(overrides: Partial<ServerCall> = {}, logged: string[] = []): ServerCall {
  return {
    method,
    request: create(SearchRequestSchema, { query: "refund", limit: 3 }),
    metadata: new Metadata(),
    deadline: undefined,
    abort: new AbortController(),
    caller: undefined,
    traceId: "",
    log: createLogger({ service: "test", write: (line) => logged.push(line) }),
    send: async () => undefined,
    ...overrides,
  };
}

const answer: CallFn = async () => ({ hits: [SAMPLE_HIT] });

describe("compose", () => {
  it("runs the first interceptor outermost", async () => {
    const seen: string[] = [];
    const tag =
      (name: string): Interceptor =>
      (next) =>
      async (call) => {
        seen.push(`${name} in`);
        const response = await next(call);
        seen.push(`${name} out`);
        return response;
      };
    await compose([tag("a"), tag("b")], answer)(testCall());
    expect(seen).toEqual(["a in", "b in", "b out", "a out"]);
  });
});

describe("authStage", () => {
  const verifier = new TokenVerifier(TEST_PUBLIC_KEYS, "kb-search");
  const stage = authStage(verifier, "kb-search", method, "kb:read")(async (call) => call.caller?.subject);
  const withToken = (token: string) => {
    const metadata = new Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    return testCall({ metadata });
  };

  it("refuses a call without a token UNAUTHENTICATED", async () => {
    const error = await refusal(stage(testCall()), ToolError);
    expect([error.code, error.reason]).toEqual([status.UNAUTHENTICATED, "CREDENTIALS_INVALID"]);
  });

  it("refuses a token without the method's scope PERMISSION_DENIED, naming the scope", async () => {
    const error = await refusal(
      stage(withToken(await testToken({ scopes: ["kb:write"], audience: "kb-search" }))),
      ToolError,
    );
    expect([error.code, error.reason, error.metadata.required_scope]).toEqual([
      status.PERMISSION_DENIED,
      "SCOPE_MISSING",
      "kb:read",
    ]);
  });

  it("refuses a token for another service", async () => {
    const error = await refusal(
      stage(withToken(await testToken({ scopes: ["kb:read"], audience: "billing" }))),
      ToolError,
    );
    expect(error.code).toBe(status.UNAUTHENTICATED);
  });

  it("hands on the verified caller", async () => {
    await expect(stage(withToken(await testToken({ scopes: ["kb:read"], subject: "agent-7" })))).resolves.toBe(
      "agent-7",
    );
  });

  it("lets a probe's token (synthetic checks) call read-only methods only, even one whose scope it carries", async () => {
    const pair = newKeyPair("test-probe");
    const probeVerifier = new TokenVerifier(
      publicKeySet({
        keys: [withBinding(pair.publicJwk, { role: "probe", subject: "release-smoke", scopes: ["billing:read"] })],
      }),
      "billing",
    );
    const token = await mintToken(signingKeyFromJwk(pair.privateJwk), {
      subject: "release-smoke",
      audience: "billing",
      scopes: ["billing:read"],
    });
    // Refund stands for a write method that requires a read-only method's scope: the effect decides, not the scope's name.
    const through = (m: typeof BillingService.method.getOrder | typeof BillingService.method.refund) => {
      const metadata = new Metadata();
      metadata.set("authorization", `Bearer ${token}`);
      return authStage(probeVerifier, "billing", m, "billing:read")(async (call) => call.caller?.role)(
        testCall({ method: m, metadata }),
      );
    };
    await expect(through(BillingService.method.getOrder)).resolves.toBe("probe");
    const error = await refusal(through(BillingService.method.refund), ToolError);
    expect([error.code, error.reason, error.message]).toEqual([
      status.PERMISSION_DENIED,
      "SCOPE_MISSING",
      "Refund is not read-only: a probe's token (synthetic checks) may call read-only methods only",
    ]);
  });
});

describe("authStage and the credential's method (claim mth)", () => {
  // QueryRisk and GetCustomerRisk share the scope risk:read: only the method claim tells them apart.
  const queryRisk = RiskService.method.queryRisk;
  const getCustomerRisk = RiskService.method.getCustomerRisk;
  const verifier = new TokenVerifier(TEST_PUBLIC_KEYS, "risk", { callKeys: testCallKeys("risk") });
  const through = (m: typeof queryRisk | typeof getCustomerRisk, token: string) => {
    const metadata = new Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    return authStage(verifier, "risk", m, "risk:read")(async (call) => call.caller?.subject)(
      testCall({ method: m, metadata }),
    );
  };
  const options = (method?: string) => ({
    subject: "session:s1",
    audience: "risk",
    scopes: ["risk:read"],
    expiresAt: Date.now() + 5000,
    ...(method ? { method } : {}),
  });

  it.each([
    ["a call credential", async (method?: string) => new CallCredentials(TEST_CALL_SECRETS).mint(options(method))],
    ["a signed token", (method?: string) => mintToken(TEST_ORCHESTRATOR_KEY, options(method))],
  ])("refuses %s minted for another method of the tool, UNAUTHENTICATED, and takes it for its own", async (_, mint) => {
    const token = await mint(methodPath(queryRisk));
    await expect(through(queryRisk, token)).resolves.toBe("session:s1");
    const error = await refusal(through(getCustomerRisk, token), ToolError);
    expect([error.code, error.reason, error.message]).toEqual([
      status.UNAUTHENTICATED,
      "CREDENTIALS_INVALID",
      "the bearer token was issued for /loopguard.risk.v1.RiskService/QueryRisk, not /loopguard.risk.v1.RiskService/GetCustomerRisk",
    ]);
    // An orchestrator from before the claim (a tool released first) still reaches the method by its scope.
    await expect(through(getCustomerRisk, await mint())).resolves.toBe("session:s1");
  });
});

describe("bindingStage", () => {
  const refund = BillingService.method.refund;
  const request = create(RefundRequestSchema, {
    orderId: "ord_DEMO00000001",
    amountCents: 500n,
    reason: RefundReason.DAMAGED,
    idempotencyKey: "binding-stage-0001",
  });
  const boundTo = (r: typeof request): Caller => ({
    subject: "session:s1",
    scopes: new Set(["billing:refund"]),
    role: "orchestrator",
    keyId: "o",
    requestDigest: requestDigest(RefundRequestSchema, r),
  });
  const through = (caller: Caller, breakGlass = false) =>
    bindingStage("billing", refund, breakGlass)(async () => "done")(testCall({ method: refund, request, caller }));
  const notBound = async (promise: Promise<unknown>) => {
    const error = await refusal(promise, ToolError);
    expect([error.code, error.reason]).toEqual([status.PERMISSION_DENIED, "CREDENTIAL_NOT_BOUND"]);
    return error.message;
  };

  it("passes the orchestrator's token bound to this exact request", async () => {
    await expect(through(boundTo(request))).resolves.toBe("done");
  });

  it("refuses a token bound to another amount, order or key", async () => {
    for (const change of [
      { amountCents: 501n },
      { orderId: "ord_DEMO00000002" },
      { idempotencyKey: "binding-stage-0002" },
    ]) {
      expect(await notBound(through(boundTo(create(RefundRequestSchema, { ...request, ...change }))))).toMatch(
        /bound to another request/,
      );
    }
  });

  it("refuses an orchestrator token bound to no request, and any person's token", async () => {
    await notBound(through({ ...boundTo(request), requestDigest: undefined }));
    expect(
      await notBound(through({ subject: "operator", scopes: new Set(["billing:refund"]), role: "person", keyId: "p" })),
    ).toMatch(/operator's person token/);
  });

  it("takes a break-glass token with a reason only where break-glass is on", async () => {
    const glass: Caller = {
      subject: "alice",
      scopes: new Set(["billing:refund"]),
      role: "break-glass",
      keyId: "g",
      breakGlassReason: "ledger fix, INC-42",
      issuedAt: Date.now(),
      expiresAt: Date.now() + 300_000,
    };
    expect(await notBound(through(glass))).toMatch(/BILLING_BREAK_GLASS=on/);
    await expect(through(glass, true)).resolves.toBe("done");
    expect(await notBound(through({ ...glass, breakGlassReason: " " }, true))).toMatch(/must say why/);
  });

  it("refuses a break-glass token beyond what `pnpm mint-token` makes: over 15 minutes, issued later than now or without iat, a reason over 200 characters or with control characters", async () => {
    const now = Date.now();
    const glass: Caller = {
      subject: "alice",
      scopes: new Set(["billing:refund"]),
      role: "break-glass",
      keyId: "g",
      breakGlassReason: "x".repeat(200),
      issuedAt: now - 1000,
      expiresAt: now - 1000 + 900_000,
    };
    await expect(through(glass, true)).resolves.toBe("done");
    // Issued within the clock skew allowance ahead of this tool's clock is still fine.
    await expect(through({ ...glass, issuedAt: now + 4000, expiresAt: now + 4000 + 900_000 }, true)).resolves.toBe(
      "done",
    );
    expect(await notBound(through({ ...glass, expiresAt: glass.issuedAt! + 901_000 }, true))).toMatch(
      /lives at most 900 s; this one 901 s/,
    );
    expect(await notBound(through({ ...glass, expiresAt: now + 365 * 86_400_000 }, true))).toMatch(/at most 900 s/);
    // exp − iat within 15 minutes, but a year from now: the future iat gives it away.
    const later = now + 365 * 86_400_000;
    expect(await notBound(through({ ...glass, issuedAt: later - 900_000, expiresAt: later }, true))).toMatch(
      /when it was issued \(iat\), and not later than now/,
    );
    expect(await notBound(through({ ...glass, issuedAt: undefined }, true))).toMatch(/iat/);
    expect(await notBound(through({ ...glass, breakGlassReason: "x".repeat(201) }, true))).toMatch(
      /reason is at most 200 characters/,
    );
    for (const reason of ["INC-2 \u0000 nul", "INC-2\nforged: log line", "INC-2\u007f"])
      expect(await notBound(through({ ...glass, breakGlassReason: reason }, true))).toMatch(
        /one line of text, without control characters/,
      );
  });

  it("judges a break-glass token's lifetime from its own iat and exp, as the verifier hands them on", async () => {
    const pair = newKeyPair("glass-alice-unit");
    const verifier = new TokenVerifier(
      publicKeySet({
        keys: [withBinding(pair.publicJwk, { role: "break-glass", subject: "alice", scopes: ["billing:refund"] })],
      }),
      "billing",
    );
    const key = signingKeyFromJwk(pair.privateJwk);
    const signed = (iat: number, exp: number) =>
      new SignJWT({ scope: "billing:refund", why: "INC-42" })
        .setProtectedHeader({ alg: "EdDSA", kid: key.kid })
        .setSubject("alice")
        .setIssuer(TOKEN_ISSUER)
        .setAudience("billing")
        .setIssuedAt(iat)
        .setExpirationTime(exp)
        .sign(key.key);
    const at = Math.floor(Date.now() / 1000);
    const caller = await verifier.verify(await signed(at, at + 900));
    expect([caller.issuedAt, caller.expiresAt]).toEqual([at * 1000, (at + 900) * 1000]);
    await expect(through(caller, true)).resolves.toBe("done");
    const year = await verifier.verify(await signed(at, at + 365 * 86_400));
    expect(await notBound(through(year, true))).toMatch(/at most 900 s/);
    const ahead = await verifier.verify(await signed(at + 3600, at + 3600 + 900));
    expect(await notBound(through(ahead, true))).toMatch(/not later than now/);
  });
});

describe("validateStage", () => {
  it("normalises, then refuses an invalid request with its field violations", async () => {
    const stage = stages.validateStage(method, (request) => ((request as { query: string }).query = ""))(answer);
    const error = await refusal(stage(testCall()), ToolError);
    expect([error.code, error.reason]).toEqual([status.INVALID_ARGUMENT, "REQUEST_INVALID"]);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["query"]);
  });

  it("passes a valid request", async () => {
    await expect(stages.validateStage(method, undefined)(answer)(testCall())).resolves.toEqual({ hits: [SAMPLE_HIT] });
  });

  const rule = (field: string, errorReason?: string) => ({
    field,
    description: "broken",
    reason: `${field}.rule`,
    errorReason,
  });
  const refusedWith = async (rules: ReturnType<typeof rule>[], query = "refund") => {
    const stage = stages.validateStage(method, undefined, () => rules)(answer);
    const error = await refusal(
      stage(testCall({ request: create(SearchRequestSchema, { query, limit: 3 }) })),
      ToolError,
    );
    return [status[error.code], error.reason, error.fieldViolations.map((v) => `${v.field} ${v.reason}`)];
  };

  it("refuses a request its rules break with every rule's violation in field order, for their one reason", async () => {
    expect(await refusedWith([rule("limit", "INDEX_UNAVAILABLE")])).toEqual([
      "INVALID_ARGUMENT",
      "INDEX_UNAVAILABLE",
      ["limit limit.rule"],
    ]);
    expect(await refusedWith([rule("limit"), rule("query")])).toEqual([
      "INVALID_ARGUMENT",
      "REQUEST_INVALID",
      ["query query.rule", "limit limit.rule"],
    ]);
  });

  it("refuses as REQUEST_INVALID when the rules give two reasons, or the contract is broken too", async () => {
    expect((await refusedWith([rule("limit", "A"), rule("query", "B")]))[1]).toBe("REQUEST_INVALID");
    expect(await refusedWith([rule("limit", "A")], "")).toEqual([
      "INVALID_ARGUMENT",
      "REQUEST_INVALID",
      ["query string.min_len", "limit limit.rule"],
    ]);
  });

  it("leaves out a rule's violation on a field the contract already refused", async () => {
    expect((await refusedWith([rule("limit", "A"), rule("query", "A")], ""))[2]).toEqual([
      "query string.min_len",
      "limit limit.rule",
    ]);
  });

  it("gives the rules the caller auth found", async () => {
    const seen: string[] = [];
    const caller = { subject: "alice" } as Caller;
    const stage = stages.validateStage(method, undefined, (_, c) => {
      seen.push(c.subject);
      return [];
    })(answer);
    await expect(stage(testCall({ caller }))).resolves.toEqual({ hits: [SAMPLE_HIT] });
    expect(seen).toEqual(["alice"]);
  });
});

describe("undecodedStage", () => {
  it("refuses an oversized request without calling on", async () => {
    const metrics = new ServerMetrics("kb-search");
    let reached = false;
    const stage = stages.undecodedStage(metrics, "kb-search", method, 100)(async () => (reached = true));
    const error = await refusal(stage(testCall({ request: new OversizedRequest(5000) })), ToolError);
    expect([error.reason, error.metadata.bytes, error.metadata.max_bytes, reached]).toEqual([
      "REQUEST_TOO_LARGE",
      "5000",
      "100",
      false,
    ]);
    expect(
      metricValue(await metrics.registry.metrics(), "loopguard_tool_requests_too_large_total", {
        grpc_method: "Search",
      }),
    ).toBe(1);
  });
});

describe("CallSlots", () => {
  const limits = {
    maxConcurrent: 1,
    maxConcurrentPerCaller: 1,
    maxStreams: 1,
    maxStreamsPerCaller: 1,
    shedRetryAfterMs: 250,
  };

  it("sheds a unary call past the limit and frees the slot when a call ends", async () => {
    const slots = new CallSlots("kb-search", limits, new ServerMetrics("kb-search"));
    let release!: () => void;
    const held = slots.unaryShed(method)(() => new Promise((resolve) => (release = () => resolve({}))));
    const first = held(testCall());
    const error = await refusal(held(testCall()), ToolError);
    expect([error.code, error.reason, error.retryAfterMs]).toEqual([status.RESOURCE_EXHAUSTED, "OVERLOADED", 250]);
    expect(slots.inFlight).toBe(1);
    release();
    await first;
    expect(slots.inFlight).toBe(0);
  });

  it("refuses calls once draining, and the drain resolves when the last call ends", async () => {
    const slots = new CallSlots("kb-search", limits, new ServerMetrics("kb-search"));
    let release!: () => void;
    const running = slots.unaryShed(method)(() => new Promise((resolve) => (release = () => resolve({}))))(testCall());
    let drained = false;
    const drain = slots.drain(new ToolError(status.UNAVAILABLE, "SHUTTING_DOWN", "bye")).then(() => (drained = true));
    const error = await refusal(slots.drainGate()(answer)(testCall()), ToolError);
    expect(error.reason).toBe("SHUTTING_DOWN");
    expect(drained).toBe(false);
    release();
    await running;
    await drain;
    expect(drained).toBe(true);
  });

  it("limits streams per caller apart from the server-wide limit", async () => {
    const slots = new CallSlots("kb-search", { ...limits, maxStreams: 5 }, new ServerMetrics("kb-search"));
    const caller: Caller = { subject: "agent-7", scopes: new Set<string>(), role: "person", keyId: "test-people" };
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const stream = slots.streamsPerCaller(method)(async () => {
      await gate;
      return undefined;
    });
    const first = stream(testCall({ caller }));
    const error = await refusal(stream(testCall({ caller })), ToolError);
    expect([error.reason, error.metadata.limit]).toEqual(["TOO_MANY_STREAMS", "caller"]);
    const other = stream(testCall({ caller: { ...caller!, subject: "agent-8" } }));
    release();
    await expect(Promise.all([first, other])).resolves.toEqual([undefined, undefined]);
    await expect(stream(testCall({ caller }))).resolves.toBeUndefined();
  });
});

describe("deadlineStage", () => {
  it("aborts the call's signal with DEADLINE_PASSED when the deadline passes", async () => {
    const call = testCall({ deadline: new Date(Date.now() + 20) });
    const error = await refusal(
      compose(
        [stages.deadlineStage],
        unaryTerminal(() => new Promise(() => undefined)),
      )(call),
      ToolError,
    );
    expect([error.code, error.reason]).toEqual([status.DEADLINE_EXCEEDED, "DEADLINE_PASSED"]);
  });
});

describe("faultStage", () => {
  it("fails calls UNAVAILABLE FAULT_INJECTED during an outage, and counts them", async () => {
    const faults = new FaultSwitch();
    const metrics = new ServerMetrics("kb-search");
    faults.set({ outage: true, retryAfterMs: 300 } as never);
    const error = await refusal(stages.faultStage(faults, metrics, "kb-search", method)(answer)(testCall()), ToolError);
    expect([error.code, error.reason, error.retryAfterMs]).toEqual([status.UNAVAILABLE, "FAULT_INJECTED", 300]);
    expect(
      metricValue(await metrics.registry.metrics(), "loopguard_tool_faults_injected_total", { kind: "outage" }),
    ).toBe(1);
  });

  it("passes calls through with no fault switched on", async () => {
    await expect(
      stages.faultStage(new FaultSwitch(), new ServerMetrics("kb-search"), "kb-search", method)(answer)(testCall()),
    ).resolves.toEqual({ hits: [SAMPLE_HIT] });
  });
});

describe("responseContractStage", () => {
  it("withholds a response that breaks the contract as INTERNAL CONTRACT_VIOLATION", async () => {
    const logged: string[] = [];
    const stage = stages.responseContractStage(
      new ServerMetrics("kb-search"),
      "kb-search",
      method,
    )(async () => ({ hits: [{ ...SAMPLE_HIT, docId: "" }] }));
    const error = await refusal(stage(testCall({}, logged)), ToolError);
    expect([error.code, error.reason]).toEqual([status.INTERNAL, "CONTRACT_VIOLATION"]);
    expect(logged.join("\n")).toContain("response withheld");
  });
});

describe("errorsStage", () => {
  const reasons = new Set(["REQUEST_INVALID"]);

  it("passes a ToolError with a contract reason unchanged", async () => {
    const own = new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", "no");
    const error = await refusal(stages.errorsStage(reasons)(() => Promise.reject(own))(testCall()), ToolError);
    expect(error).toBe(own);
  });

  it("turns an unknown exception or reason into INTERNAL and logs it", async () => {
    const logged: string[] = [];
    const thrown = await refusal(
      stages.errorsStage(reasons)(() => Promise.reject(new TypeError("boom")))(testCall({}, logged)),
      ToolError,
    );
    const foreign = await refusal(
      stages.errorsStage(reasons)(() => Promise.reject(new ToolError(status.NOT_FOUND, "NOT_OURS", "x")))(
        testCall({}, logged),
      ),
      ToolError,
    );
    expect([thrown.reason, foreign.reason]).toEqual(["INTERNAL_ERROR", "INTERNAL_ERROR"]);
    expect(logged.join("\n")).toContain("unexpected exception in handler");
    expect(logged.join("\n")).toContain("outside its contract");
  });
});

describe("metricsStage and traceStage", () => {
  it("exports every method's started and handled series at 0 before its first call, so increase() sees each from 0", async () => {
    const metrics = new ServerMetrics("kb-search");
    stages.metricsStage(metrics, method);
    const page = parseMetrics(await metrics.registry.metrics());
    const values = (name: string) =>
      samplesOf(page, name, { grpc_method: "Search" }).map((s) => [s.labels.grpc_code, s.value]);
    expect(values("grpc_server_started_total")).toEqual([[undefined, 0]]);
    expect(values("grpc_server_handled_total")).toHaveLength(17);
    for (const code of ["OK", "UNAVAILABLE", "DEADLINE_EXCEEDED", "INVALID_ARGUMENT", "UNAUTHENTICATED"])
      expect(values("grpc_server_handled_total")).toContainEqual([code, 0]);
  });

  it("count every outcome by code and give the call a trace id and a bound logger", async () => {
    const metrics = new ServerMetrics("kb-search");
    const log = createLogger({ service: "test", write: () => undefined });
    const chain = compose(
      [stages.metricsStage(metrics, method), stages.traceStage(method, log)],
      async (call) => call.traceId,
    );
    const traceId = await chain(testCall());
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    await refusal(
      compose([stages.metricsStage(metrics, method)], () => Promise.reject(new ToolError(status.NOT_FOUND, "X", "x")))(
        testCall(),
      ),
      ToolError,
    );
    const page = await metrics.registry.metrics();
    expect(metricValue(page, "grpc_server_started_total", { grpc_method: "Search" })).toBe(2);
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(1);
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "NOT_FOUND" })).toBe(1);
  });
});
