// The bulkhead stage alone: its slots, its queue, and callers that stop waiting in it.
import { create } from "@bufbuild/protobuf";
import { KbSearchService, SearchRequestSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { status } from "../errors.js";
import { Bulkhead } from "./bulkhead.js";
import { CallError } from "./call-error.js";
import { callTarget, type ClientCall, newCall } from "./chain.js";
import { bulkheadStage } from "./stages/bulkhead.js";

const target = callTarget("kb-search", KbSearchService.method.search, new Set());

function call(query: string, options: { deadline?: number; signal?: AbortSignal } = {}): ClientCall {
  return newCall({
    target,
    request: create(SearchRequestSchema, { query, limit: 1 }),
    options: options.signal ? { signal: options.signal } : {},
    deadline: options.deadline,
  });
}

/** The rest of the chain: each call it is given runs until released; `sent` lists them in order. */
function tool() {
  const sent: string[] = [];
  const release = new Map<string, () => void>();
  const next = (c: ClientCall) =>
    new Promise((resolve) => {
      const query = (c.request as unknown as { query: string }).query;
      sent.push(query);
      release.set(query, () => resolve({ query }));
    });
  return { next, sent, release: (query: string) => release.get(query)!() };
}

async function failure(promise: Promise<unknown>): Promise<CallError> {
  const error = await promise.then(
    () => expect.fail("the call was answered"),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(CallError);
  return error as CallError;
}

describe("bulkheadStage", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("refuses a call beyond the calls in flight and queued: RESOURCE_EXHAUSTED, BULKHEAD_FULL, nothing sent", async () => {
    const kb = tool();
    const stage = bulkheadStage(new Bulkhead(1, 0))(kb.next);
    const first = stage(call("first"));
    const error = await failure(stage(call("second")));
    expect([error.code, error.reason, error.attempts]).toEqual([status.RESOURCE_EXHAUSTED, "BULKHEAD_FULL", 0]);
    kb.release("first");
    await first;
    expect(kb.sent).toEqual(["first"]);
  });

  it("ends a queued call at its caller's deadline, not when a slot frees: DEADLINE_EXCEEDED, DEADLINE_PASSED, nothing sent", async () => {
    const kb = tool();
    const stage = bulkheadStage(new Bulkhead(1, 1))(kb.next);
    const holder = stage(call("holder"));
    const queued = failure(stage(call("queued", { deadline: Date.now() + 200 })));
    await vi.advanceTimersByTimeAsync(200);
    const error = await queued;
    expect([error.code, error.reason, error.attempts]).toEqual([status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", 0]);
    kb.release("holder");
    await holder;
    expect(kb.sent).toEqual(["holder"]);
  });

  it("takes a cancelled call out of the queue at once: CANCELLED, CALL_CANCELLED, and its place goes to the next caller", async () => {
    const kb = tool();
    const bulkhead = new Bulkhead(1, 1);
    const stage = bulkheadStage(bulkhead)(kb.next);
    const holder = stage(call("holder"));
    const cancel = new AbortController();
    const cancelled = failure(stage(call("cancelled", { signal: cancel.signal })));
    cancel.abort();
    const error = await cancelled;
    expect([error.code, error.reason, error.attempts]).toEqual([status.CANCELLED, "CALL_CANCELLED", 0]);
    expect(bulkhead.queued).toBe(0);
    const other = stage(call("other"));
    kb.release("holder");
    await holder;
    await vi.waitFor(() => expect(kb.sent).toEqual(["holder", "other"]));
    kb.release("other");
    await expect(other).resolves.toEqual({ query: "other" });
  });

  it("hands a freed slot to the first caller still waiting, so none is left queued beside a free slot", async () => {
    const kb = tool();
    const bulkhead = new Bulkhead(1, 3);
    const stage = bulkheadStage(bulkhead)(kb.next);
    const holder = stage(call("holder"));
    const cancel = new AbortController();
    const gaveUp = failure(stage(call("gave-up", { signal: cancel.signal })));
    const second = stage(call("second"));
    const third = stage(call("third"));
    cancel.abort();
    await gaveUp;
    kb.release("holder");
    await holder;
    await vi.waitFor(() => expect(kb.sent).toEqual(["holder", "second"]));
    kb.release("second");
    await second;
    await vi.waitFor(() => expect(kb.sent).toEqual(["holder", "second", "third"]));
    kb.release("third");
    await third;
    expect([bulkhead.inFlight, bulkhead.queued]).toEqual([0, 0]);
  });

  it("refuses at once a call that would have to wait when its caller already gave up or its deadline passed", async () => {
    const kb = tool();
    const stage = bulkheadStage(new Bulkhead(1, 1))(kb.next);
    const holder = stage(call("holder"));
    const aborted = await failure(stage(call("aborted", { signal: AbortSignal.abort() })));
    const late = await failure(stage(call("late", { deadline: Date.now() })));
    expect([aborted.reason, late.reason]).toEqual(["CALL_CANCELLED", "DEADLINE_PASSED"]);
    kb.release("holder");
    await holder;
  });

  it("leaves no timer or abort listener behind, whether a queued call gets its slot or gives up", async () => {
    const kb = tool();
    const stage = bulkheadStage(new Bulkhead(1, 2))(kb.next);
    const cancel = new AbortController();
    const listeners = vi.spyOn(cancel.signal, "removeEventListener");
    const holder = stage(call("holder", { deadline: Date.now() + 60_000, signal: cancel.signal }));
    // A call that finds a free slot sets nothing up.
    expect(vi.getTimerCount()).toBe(0);
    const admitted = stage(call("admitted", { deadline: Date.now() + 60_000, signal: cancel.signal }));
    const gaveUp = failure(stage(call("gave-up", { deadline: Date.now() + 100 })));
    expect(vi.getTimerCount()).toBe(2);
    await vi.advanceTimersByTimeAsync(100);
    await gaveUp;
    expect(vi.getTimerCount()).toBe(1);
    kb.release("holder");
    await holder;
    await vi.waitFor(() => expect(kb.sent).toEqual(["holder", "admitted"]));
    expect(vi.getTimerCount()).toBe(0);
    expect(listeners).toHaveBeenCalledWith("abort", expect.any(Function));
    kb.release("admitted");
    await admitted;
  });
});
