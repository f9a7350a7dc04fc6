// The model call settings from the environment: tokenizer encoding, timeout cap and price table.
import { ConfigError, enumSetting, integerSetting } from "@loopguard/tool-sdk";
import { DEFAULT_ENCODING, ENCODINGS, type EncodingName, encodingForModel } from "./model-tokens.js";
import { type ModelPrice, priceTableSchema } from "./model-prices.js";

export interface ModelSettings {
  /** MODEL_TOKENIZER_ENCODING, else the encoding of OPENAI_MODEL's family, else the default. */
  readonly encoding: EncodingName;
  /** MODEL_TIMEOUT_MS: the most one model call may take; the session's wall clock left may cut it shorter. */
  readonly timeoutMs: number;
  /** MODEL_PRICES over the defaults (model-prices.ts), per 1M tokens in the account's currency units. */
  readonly prices: Readonly<Record<string, ModelPrice>>;
}

export const DEFAULT_MODEL_TIMEOUT_MS = 30_000;

type Env = Readonly<Record<string, string | undefined>>;

/** Throws a ConfigError naming the variable and what is wrong with it. */
export function modelSettings(env: Env, model: string | undefined): ModelSettings {
  const fallback = model ? encodingForModel(model) : DEFAULT_ENCODING;
  return {
    encoding: enumSetting(env, "MODEL_TOKENIZER_ENCODING", ENCODINGS, fallback),
    timeoutMs: integerSetting(env, "MODEL_TIMEOUT_MS", { default: DEFAULT_MODEL_TIMEOUT_MS, min: 100, max: 600_000 }),
    prices: parsePrices(env.MODEL_PRICES ?? ""),
  };
}

function parsePrices(raw: string): Record<string, ModelPrice> {
  if (raw.trim() === "") return {};
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new ConfigError('MODEL_PRICES must be JSON such as {"gpt-4o-mini":{"input":0.15,"output":0.6}}');
  }
  const parsed = priceTableSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(
      `MODEL_PRICES ${issue?.path.join(".") || "(top level)"}: ${issue?.message ?? "invalid"} (expected {"<model>":{"input":<per 1M>,"output":<per 1M>}})`,
    );
  }
  return parsed.data;
}
