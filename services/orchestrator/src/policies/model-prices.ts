// What a model call costs: a price per million input and output tokens for each model, in the
// account's currency units (as the vendors publish them), turned into micros of that currency
// against the session's maxCostMicros. The table is configurable (MODEL_PRICES); a model it does
// not list costs nothing, and the resolved config says which models are priced.
import { z } from "zod";
import type { TokenUsage } from "./policy.js";

export interface ModelPrice {
  /** Currency units per 1M input (prompt) tokens. */
  readonly input: number;
  /** Currency units per 1M output (completion) tokens. */
  readonly output: number;
}

export type PriceTable = ReadonlyMap<string, ModelPrice>;

/** List prices (USD per 1M tokens) of common OpenAI models; MODEL_PRICES adds to or overrides them. */
export const DEFAULT_MODEL_PRICES: Readonly<Record<string, ModelPrice>> = Object.freeze({
  "gpt-4o-mini": { input: 0.15, output: 0.6 },
  "gpt-4o": { input: 2.5, output: 10 },
  "gpt-4.1-mini": { input: 0.4, output: 1.6 },
  "gpt-4.1": { input: 2, output: 8 },
  "o4-mini": { input: 1.1, output: 4.4 },
});

const priceSchema = z.strictObject({
  input: z.number().min(0).max(1_000_000),
  output: z.number().min(0).max(1_000_000),
});
export const priceTableSchema = z.record(z.string().min(1).max(200), priceSchema);

/** The default table with `overrides` (MODEL_PRICES, already parsed) on top. */
export function priceTable(overrides: Readonly<Record<string, ModelPrice>> = {}): PriceTable {
  return new Map(Object.entries({ ...DEFAULT_MODEL_PRICES, ...overrides }));
}

/** The price of a model: its exact name, else the longest listed name it starts with ("gpt-4o-mini-2024-07-18" → "gpt-4o-mini"). */
export function priceOf(table: PriceTable, model: string | undefined): ModelPrice | undefined {
  if (model === undefined) return undefined;
  const exact = table.get(model);
  if (exact) return exact;
  let best: [string, ModelPrice] | undefined;
  for (const entry of table)
    if (model.startsWith(`${entry[0]}-`) && (!best || entry[0].length > best[0].length)) best = entry;
  return best?.[1];
}

/** Micros of the currency for this many tokens (1 unit per 1M tokens = 1 micro per token), rounded up. */
export function costMicrosOf(price: ModelPrice | undefined, usage: TokenUsage): number {
  if (!price) return 0;
  return Math.ceil(usage.input * price.input + usage.output * price.output);
}
