// The task's own phone and id card written by the model in a shape no redactor knows
// ("138*0013*8000"), in a call's arguments and id, an unknown tool's name and a bad argument (both
// quoted back in the observations), a final answer and its uncertainty reason. GetSession serves them masked (served-own-numbers);
// GetTrace, the dashboard's session detail, the JSONL trace file, the orchestrator's log and its
// spans must not hold them either; nor, with GetSession and ListSessions, those numbers written as
// JSON escapes ("\u0031\u0033\u0038…") in raw arguments, refused calls and the answer. The SDK's
// in-memory exporter records every span, so this file runs apart (GLOBAL_TELEMETRY_FILES).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { trace } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { LOW_RISK_CUSTOMER, modelSession, useSuite } from "./harness.js";

const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));

const suite = useSuite({ orchestrator: false });

/**
 * The task's phone (+86 138 0013 8000) and id card (110101198003121232) in shapes tool-sdk's redactor
 * knows no more than its own release does ("*", "~", "--"), and in some it never will (a middle dot,
 * a star): only the task's digits give those away.
 */
const STARS = [
  "138*0013*8000",
  "110101*19800312*1232",
  "138 ~ 0013 ~ 8000",
  "110101--19800312--1232",
  "138·0013·8000",
  "110101★19800312★1232",
];

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000002",
  amount_cents: 500,
  reason: "DAMAGED",
  ...LOW_RISK_CUSTOMER,
};

/** Each STARS shape found in `text`, as written or escaped in JSON. */
const found = (text: string) =>
  STARS.filter((shape) => text.includes(shape) || text.includes(JSON.stringify(shape).slice(1, -1)));

/** `text` with every character a JSON escape, as a model may write it: "1" as "\u0031". */
const escaped = (text: string) => [...text].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

/** The task's numbers `text` holds once every escape in it, at any depth, is decoded. */
function ownNumbersIn(text: string): string[] {
  const decoded = text.replace(/\\+u([0-9A-Fa-f]{4})/g, (_escape, hex: string) =>
    String.fromCharCode(Number.parseInt(hex, 16)),
  );
  return ["13800138000", "110101198003121232"].filter((number) => decoded.includes(number));
}

const serialised = (value: unknown) => JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? String(v) : v));

/** The JSONL trace files' text once it holds `sessionId`'s last step (the file is written after the step commits). */
async function traceFiles(dir: string, sessionId: string, steps: number): Promise<string> {
  for (let i = 0; ; i += 1) {
    const text = readdirSync(dir)
      .map((name) => readFileSync(join(dir, name), "utf8"))
      .join("");
    if (text.split(sessionId).length - 1 >= steps || i === 50) return text;
    await sleep(100);
  }
}

describe("the task's own numbers the model writes in shapes only their digits give away", () => {
  it("are hidden by GetTrace, GetSessionDetail, the trace file, the log and the spans", async () => {
    const chat = await startFakeChatServer([
      () =>
        chatCompletion({
          toolCalls: [
            { id: STARS[3], name: "kb_search_search", arguments: `{"query":"${STARS[2]} ${STARS[4]}","limit":1}` },
            { id: "c2", name: "kb_search_search", arguments: `{"query":"refund","limit":"${STARS[5]}"}` },
            { id: "c3", name: `${STARS[0]} ${STARS[4]}`, arguments: "{}" },
          ],
        }),
      () =>
        chatCompletion({
          content: JSON.stringify({
            answer: `Called ${STARS[0]} and ${STARS[4]}, all good.`,
            confidence: 0.9,
            uncertainty_reason: `is ${STARS[1]} or ${STARS[5]} theirs?`,
          }),
        }),
    ]);
    suite.onCleanUp(() => chat.close());
    const orch = await suite.startOrchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
    const done = await modelSession(orch, "Look the customer up", TASK);
    const id = done.sessionId;
    const records = (await orch.api.getTrace({ sessionId: id })).records;
    const detail = await orch.api.getSessionDetail({ sessionId: id });
    const attributes = spans.getFinishedSpans().map((s) => JSON.stringify(s.attributes));
    const seen = {
      getTrace: found(records.join("\n")),
      getSessionDetailSteps: found(JSON.stringify(detail.steps.map((s) => s.record))),
      getSessionDetailLogs: found(JSON.stringify(detail.logs)),
      traceFile: found(await traceFiles(join(orch.dataDir, "traces"), id, records.length)),
      log: found(orch.logs.join("\n")),
      spans: found(attributes.join("\n")),
    };
    expect(records.length).toBeGreaterThanOrEqual(2);
    expect(seen).toEqual({
      getTrace: [],
      getSessionDetailSteps: [],
      getSessionDetailLogs: [],
      traceFile: [],
      log: [],
      spans: [],
    });
    expect(done.answer).toBe("Called [redacted] and [redacted], all good.");
  });

  it("written as JSON escapes are redacted in GetSession, ListSessions, GetTrace, GetSessionDetail, the trace file and the spans", async () => {
    const phone = escaped("13800138000");
    const idCard = escaped("110101198003121232");
    const chat = await startFakeChatServer([
      () =>
        chatCompletion({
          toolCalls: [
            { id: "c1", name: "kb_search_search", arguments: `{"query":"${phone}","limit":1}` },
            { id: "c2", name: "kb_search_search", arguments: `{"query":"${idCard}","limit":` },
            { id: "c3", name: "kb_search_search", arguments: `{"query":"refund","limit":"${phone}"}` },
            { id: "c4", name: "kb_search_search", arguments: `{"query":"refund","limit":1,"${idCard}":1}` },
          ],
        }),
      () => chatCompletion({ content: JSON.stringify({ answer: `Done for ${phone} / ${idCard}.`, confidence: 0.9 }) }),
    ]);
    suite.onCleanUp(() => chat.close());
    spans.reset();
    const orch = await suite.startOrchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
    const done = await modelSession(orch, "Look the customer up", TASK);
    const id = done.sessionId;
    const records = (await orch.api.getTrace({ sessionId: id })).records;
    const seen = {
      getSession: ownNumbersIn(serialised(done)),
      listSessions: ownNumbersIn(serialised((await orch.api.listSessions({})).sessions)),
      getTrace: ownNumbersIn(records.join("\n")),
      getSessionDetail: ownNumbersIn(serialised(await orch.api.getSessionDetail({ sessionId: id }))),
      traceFile: ownNumbersIn(await traceFiles(join(orch.dataDir, "traces"), id, records.length)),
      log: ownNumbersIn(orch.logs.join("\n")),
      spans: ownNumbersIn(
        spans
          .getFinishedSpans()
          .map((s) => JSON.stringify(s.attributes))
          .join("\n"),
      ),
    };
    expect(records.length).toBeGreaterThanOrEqual(2);
    expect(seen).toEqual({
      getSession: [],
      listSessions: [],
      getTrace: [],
      getSessionDetail: [],
      traceFile: [],
      log: [],
      spans: [],
    });
    expect(done.answer).toBe("Done for [redacted] / [redacted].");
    expect(records[0]).toContain(JSON.stringify(JSON.stringify({ query: "[redacted]", limit: 1 })).slice(1, -1));
  });
});
