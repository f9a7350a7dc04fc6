// `pnpm bench tokens [tasks.jsonl]`: for each task (one JSON object a line with `goal` and `task`),
// the first request's tokens as the model's tokenizer counts them (messages, tool schemas and
// per-message overhead) beside the old estimate (four characters a token of the prompt's JSON);
// then a long session's compression: 40 searches governed to the default limits.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  DEFAULT_CONTEXT_LIMITS,
  encodingForModel,
  estimateTokens,
  governContext,
  type HistoryItem,
  tokenCounter,
  ToolRegistry,
} from "@loopguard/orchestrator";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
/** The patrol's golden set when it is there; a few sample tasks otherwise. */
const DEFAULT_TASKS = [
  join(root, "test", "golden", "tasks.jsonl"),
  join(root, "test", "fixtures", "sample-tasks.jsonl"),
];
const LONG_SESSION_STEPS = 40;

interface Task {
  readonly id: string;
  readonly goal: string;
  readonly task: Record<string, unknown>;
}

function readTasks(path: string): Task[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .map((line, i) => ({ line: line.trim(), n: i + 1 }))
    .filter(({ line }) => line !== "")
    .map(({ line, n }) => {
      const value = JSON.parse(line) as { id?: unknown; goal?: unknown; task?: unknown };
      if (typeof value.goal !== "string") throw new Error(`${path}:${n}: expected a "goal" string`);
      const task = typeof value.task === "object" && value.task !== null ? (value.task as Record<string, unknown>) : {};
      return { id: typeof value.id === "string" ? value.id : `line ${n}`, goal: value.goal, task };
    });
}

/** A search result of a realistic size: three hits with titles and snippets. */
function searchResult(i: number): HistoryItem[] {
  const hits = [1, 2, 3].map((h) => ({
    docId: `doc-${i}-${h}`,
    version: 1,
    title: `Refund rules, part ${i}.${h}`,
    snippet: `Refunds to cards take ${h + 2} to ${h + 9} business days; ${"the bank may hold the amount while it checks the order. ".repeat(4)}`,
  }));
  return [
    {
      kind: "call",
      callId: `c${i}`,
      tool: "kb_search_search",
      arguments: JSON.stringify({ query: `refund rules part ${i}`, limit: 3 }),
    },
    {
      kind: "observation",
      callId: `c${i}`,
      tool: "kb_search_search",
      envelope: {
        ok: true,
        data: { hits },
        refs: hits.map((h) => `kb:${h.docId}@1`),
        costMicros: 100,
        servedFrom: "live",
        observedAt: new Date(0).toISOString(),
      },
    },
  ];
}

export function benchTokens(args: readonly string[]): void {
  const model = process.env.OPENAI_MODEL || "gpt-4o-mini";
  const encoding = encodingForModel(model);
  const counter = tokenCounter(encoding);
  const tools = new ToolRegistry().specs();
  const path = args[0] ?? DEFAULT_TASKS.find((p) => existsSync(p))!;
  console.log(`tokens: first request of each task in ${path}, ${encoding} (${model}), ${tools.length} tools`);
  console.log(`  ${"task".padEnd(24)} ${"tokenizer".padStart(9)} ${"chars/4".padStart(8)} ${"ratio".padStart(6)}`);
  for (const t of readTasks(path)) {
    const counted = counter.prompt({ goal: t.goal, task: t.task as never, tools, history: [] });
    // The old estimate: four characters a token of JSON.stringify({ goal, task, history }), tools not counted.
    const old = estimateTokens(JSON.stringify({ goal: t.goal, task: t.task, history: [] }));
    console.log(
      `  ${t.id.slice(0, 24).padEnd(24)} ${String(counted).padStart(9)} ${String(old).padStart(8)} ${(counted / old).toFixed(2).padStart(6)}`,
    );
  }

  const goal = "Collect every refund rule";
  let history: HistoryItem[] = [];
  let saved = 0;
  let last = { tokens: 0, tokensBefore: 0 };
  for (let i = 0; i < LONG_SESSION_STEPS; i += 1) {
    history = [...history, ...searchResult(i)];
    const governed = governContext(
      { goal, task: {}, tools, history },
      DEFAULT_CONTEXT_LIMITS,
      counter,
      Number.MAX_SAFE_INTEGER,
    );
    history = governed.history;
    saved += governed.tokensBefore - governed.tokens;
    last = governed;
  }
  const uncompressed = last.tokens + saved;
  console.log(
    `tokens: a ${LONG_SESSION_STEPS}-step session (compress above ${DEFAULT_CONTEXT_LIMITS.compressAboveTokens}): last prompt ${last.tokens} tokens, ${uncompressed} without compression, ratio ${(last.tokens / uncompressed).toFixed(3)}\n`,
  );
}
