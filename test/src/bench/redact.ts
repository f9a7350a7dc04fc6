// `pnpm bench redact`: what redaction costs on the orchestrator's hot path, in µs per call, for
// the values every step passes through it: a whole step record (redact), and texts (redactText)
// with and without personal data in them. Synchronous, single-threaded, bounded in time.
import { redact } from "@loopguard/orchestrator";
import { redactText } from "@loopguard/tool-sdk";

/** A step record as the runner writes it for a kb-search call, its result not yet redacted. */
function stepRecord(): Parameters<typeof redact>[0] {
  return {
    run_id: "run-3f1c2b9a",
    session_id: "ses_01JD8Z6Q0R4T5V7W9X2Y3Z4A5B",
    step: 3,
    state_before: "TOOL_EXECUTING",
    state_after: "OBSERVING",
    decision: {
      kind: "tool_call",
      id: "call_2_0",
      name: "kb_search_search",
      arguments: '{"query":"refund policy","limit":3}',
      served_from: "live",
    },
    result: {
      ok: true,
      data: {
        hits: [
          {
            docId: "refund-policy",
            version: 1,
            title: "Refund policy",
            snippet: "Refunds above 500.00 are approved by a second person within 2 business days.",
            score: 3.25,
          },
          {
            docId: "card-refunds",
            version: 2,
            title: "Card refunds",
            snippet: "Card refunds take 5-10 days to appear on the statement.",
            score: 2.5,
          },
          {
            docId: "returns",
            version: 1,
            title: "What cannot be returned",
            snippet: "Gift cards and opened software cannot be returned.",
            score: 1.75,
          },
        ],
      },
      refs: ["kb:refund-policy@1", "kb:card-refunds@2", "kb:returns@1"],
      costMicros: 100,
      servedFrom: "live",
      observedAt: "2026-11-29T10:15:42.123Z",
    },
    budget_before: {
      steps: 2,
      toolCalls: 2,
      tokens: 812,
      costMicros: 200,
      startedAt: 1764411342000,
      limits: { maxSteps: 20, maxToolCalls: 10, maxTokens: 100000, deadlineMs: 120000, maxCostMicros: 1000000 },
    },
    fingerprint: "9f2c51d0a4b8e7f3c6d2a1b0e9f8d7c6",
    prompt_hash: "4b6f0c2e9a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b",
    tool_version: "loopguard/kb/v1/kb.proto",
    attempt: 1,
    trace_id: "ac09a81508038a8cd16222381507dadc",
    traceparent: "00-ac09a81508038a8cd16222381507dadc-00f067aa0ba902b7-01",
    duration_ms: 1.234,
    at: "2026-11-29T10:15:42.125Z",
  };
}

const TEXTS: readonly [string, string][] = [
  ["timestamp", "2026-11-29T10:15:42.123Z"],
  [
    "refund answer",
    "Refunded 100 cents of order ord_DEMO00000002 under Refund policy [refund-policy@1]; refund id rf_AbCdEfGh12345678.",
  ],
  ["step record JSON", JSON.stringify(stepRecord())],
  ["text with a phone", "The customer (139)12345678 asked for a refund of order ord_DEMO00000002 on 2026-11-29."],
  ["text with an id card", "id card 11010519491231002x, order ord_DEMO00000002"],
  ["text with a spread id card", "id card 1_1_0_1_0_5_1_9_4_9_1_2_3_1_0_0_2_X, order ord_DEMO00000002"],
  [
    "text with a spread phone",
    "The customer 1, 3, 9, 1, 2, 3, 4, 5, 6, 7, 8 asked for a refund of order ord_DEMO00000002.",
  ],
];

/** µs per call: the median of several timed batches, after a warm-up that lets V8 optimise. */
function perCallMicros(fn: () => unknown, budgetMs: number): number {
  let sink = 0;
  const batch = 2_000;
  for (let i = 0; i < 20_000; i += 1) sink += fn() === undefined ? 0 : 1;
  const samples: number[] = [];
  const until = performance.now() + budgetMs;
  while (performance.now() < until || samples.length < 5) {
    const t0 = performance.now();
    for (let i = 0; i < batch; i += 1) sink += fn() === undefined ? 0 : 1;
    samples.push(((performance.now() - t0) * 1000) / batch);
  }
  if (sink < 0) console.log(sink);
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

export function benchRedact(durationMs: number): void {
  const budget = Math.max(200, durationMs / (TEXTS.length + 1));
  const record = stepRecord();
  console.log("redact: µs per call (median of 2,000-call batches)");
  console.log(
    `  ${"redact(step record)".padEnd(40)} ${perCallMicros(() => redact(record), budget)
      .toFixed(3)
      .padStart(8)} µs`,
  );
  for (const [label, text] of TEXTS) {
    console.log(
      `  ${`redactText(${label})`.padEnd(40)} ${perCallMicros(() => redactText(text), budget)
        .toFixed(3)
        .padStart(8)} µs  (${text.length} chars)`,
    );
  }
  console.log();
}
