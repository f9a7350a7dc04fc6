// Token counts as the model sees them: the chat messages and tool schemas the openai policy sends,
// counted with the model family's BPE encoding (gpt-tokenizer bundles them, so this works offline)
// and OpenAI's per-message and per-function overheads (gpt-tokenizer's computeChatCompletionTokenCount).
import { createRequire } from "node:module";
import {
  type ChatCompletionFunctionDefinition,
  type ChatMessage,
  computeChatCompletionTokenCount,
  estimateTokensInFunctions,
  padSystemMessage,
  SYSTEM_FUNCTION_TOKEN_DEDUCTION,
} from "gpt-tokenizer/functionCalling";
import { LRUCache } from "lru-cache";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { toChatMessages, toChatTool } from "./chat-request.js";
import type { PolicyInput, ToolSpec } from "./policy.js";

export const ENCODINGS = ["o200k_base", "cl100k_base"] as const;
export type EncodingName = (typeof ENCODINGS)[number];

/** For a model family the table below does not know (local models, other vendors): the newest OpenAI encoding. */
export const DEFAULT_ENCODING: EncodingName = "o200k_base";

/** The encoding of a model by its name: gpt-4o, gpt-4.1, gpt-5 and the o-series use o200k_base; gpt-4 and gpt-3.5 cl100k_base. */
export function encodingForModel(model: string): EncodingName {
  const name = model.toLowerCase().replace(/^.*\//, "");
  if (/^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o\d|chatgpt-4o|gpt-oss)/.test(name)) return "o200k_base";
  if (/^(gpt-4|gpt-3\.5|gpt-35)/.test(name)) return "cl100k_base";
  return DEFAULT_ENCODING;
}

export interface TokenCounter {
  readonly encoding: EncodingName;
  /** Tokens of one text, without any chat framing. */
  text(text: string): number;
  /** Tokens of the request the openai policy would send for this input (messages, tool schemas, reply priming). */
  prompt(input: Pick<PolicyInput, "goal" | "task" | "tools" | "history">): number;
}

/**
 * Texts already counted: a session's messages repeat on every step, and most are counted again
 * unchanged. Short ones too (roles, names, a JSON text's pieces): a lookup costs less than their BPE.
 * Bounded by count and by characters (each text by its length and an entry's overhead), so large
 * tool results cannot grow the heap without bound; a text over an eighth of that is counted each time.
 */
const CACHE_ENTRIES = 20_000;
const CACHE_CHARS = 4_000_000;
const ENTRY_OVERHEAD_CHARS = 64;

/**
 * A copy of `text` that holds no larger string: V8 keeps a substring (a piece cut from a tool result)
 * as a slice of the whole, which a cache key would otherwise keep alive, unaccounted.
 */
const own = (text: string): string => ` ${text}`.slice(1);

const require = createRequire(import.meta.url);

/**
 * The encoding's counter, loaded on first use: each encoding's ranks take a second or two to load
 * and a few MB, so a process loads only the one it counts with (a static import would load both).
 */
function loadEncoding(encoding: EncodingName): (text: string) => number {
  const module = require(`gpt-tokenizer/encoding/${encoding}`) as { countTokens: (text: string) => number };
  return module.countTokens;
}

export function tokenCounter(encoding: EncodingName): TokenCounter {
  let loaded: ((text: string) => number) | undefined;
  const count = (value: string): number => {
    loaded ??= loadEncoding(encoding);
    return loaded(value);
  };
  const cache = new LRUCache<string, number>({
    max: CACHE_ENTRIES,
    maxSize: CACHE_CHARS,
    maxEntrySize: CACHE_CHARS / 8,
    sizeCalculation: (_n, key) => key.length + ENTRY_OVERHEAD_CHARS,
  });
  const cached = (value: string): number => {
    let n = cache.get(value);
    if (n === undefined) {
      n = count(value);
      cache.set(own(value), n);
    }
    return n;
  };
  const text = (value: string): number => {
    if (value.length < MIN_SPLIT_CHARS) return cached(value);
    let n = cache.get(value);
    if (n === undefined) {
      n = 0;
      for (const piece of piecesOf(value)) n += cached(piece);
      cache.set(own(value), n);
    }
    return n;
  };
  const functions = functionsCount(text);
  return {
    encoding,
    text,
    prompt: (input) => {
      const messages = toChatMessages(input).flatMap(toCountedMessages);
      if (input.tools.length === 0) return computeChatCompletionTokenCount({ messages }, text);
      // computeChatCompletionTokenCount({ messages, functions }) in three parts, so that the parts
      // that repeat from step to step are counted from what is kept: its system message padded
      // with a newline, the messages, and the function definitions less their system deduction.
      const system = padFirstSystem(messages);
      return (
        computeChatCompletionTokenCount({ messages }, text) +
        functions(input.tools) -
        (system ? SYSTEM_FUNCTION_TOKEN_DEDUCTION : 0)
      );
    },
  };
}

/**
 * The function definitions' tokens (estimateTokensInFunctions), kept for the last list of tools
 * counted that starts with the same spec: a session is shown the same tools on every step
 * (ToolRegistry hands out the same specs) unless a breaker opens, so each count would otherwise
 * format and look up the same text again.
 */
function functionsCount(text: (value: string) => number): (tools: readonly ToolSpec[]) => number {
  // Per first spec, so that sessions of other scopes (other lists) keep their own.
  const kept = new WeakMap<ToolSpec, { tools: readonly ToolSpec[]; tokens: number }>();
  return (tools) => {
    const first = tools[0]!;
    const last = kept.get(first);
    if (last && last.tools.length === tools.length && last.tools.every((tool, i) => tool === tools[i]))
      return last.tokens;
    const definitions = tools.map((tool) => toChatTool(tool).function as ChatCompletionFunctionDefinition);
    const tokens = estimateTokensInFunctions(definitions, text);
    kept.set(first, { tools: [...tools], tokens });
    return tokens;
  };
}

/** The last system message's text counted with functions, and the message gpt-tokenizer counts in its place. */
let paddedSystem: { content: ChatMessage["content"]; padded: ChatMessage } | undefined;

/**
 * Puts in place of the first system message what gpt-tokenizer counts when there are functions
 * (padSystemMessage: a newline added), the same padded message each step, so its text is one
 * string whose count is a cache hit rather than a new string to hash again. Whether there was one.
 */
function padFirstSystem(messages: ChatMessage[]): boolean {
  const i = messages.findIndex((m) => m.role === "system");
  if (i < 0) return false;
  const message = messages[i]!;
  if (paddedSystem?.content !== message.content)
    paddedSystem = { content: message.content, padded: padSystemMessage(message, true, false) };
  messages[i] = paddedSystem.padded;
  return true;
}

/** Texts shorter than this are counted whole: splitting them saves nothing. */
const MIN_SPLIT_CHARS = 256;

/**
 * Where a text is cut into pieces counted apart: after two ASCII punctuation characters and
 * before a letter, as in `,"key` and `{"key` of JSON (tool results, arguments, the task).
 */
const SEAM = /[,{]"(?=[A-Za-z])/g;

/**
 * A long text cut at seams where the encoding's pre-tokenizer always cuts too, so the pieces'
 * counts add up to the whole's exactly. Both encodings split text into chunks before BPE, and no
 * token spans two chunks. The chunk holding a seam's `,` (or `{`) can only be a run of punctuation
 * (every other kind of chunk is letters, digits, spaces, a contraction such as 's, or one character
 * before letters); a run is taken greedily and ends only where a letter, digit or space begins, so it
 * ends exactly at the letter after `,"`. No chunking rule looks behind, so the text after a seam is
 * chunked the same on its own. A tool result's envelope repeats most of its keys and values from call
 * to call (its observedAt and ids differ), so its pieces are mostly counted already (written by hand:
 * gpt-tokenizer counts a text whole; model-tokens.test.ts checks the sums against whole counts).
 */
function piecesOf(text: string): string[] {
  const pieces: string[] = [];
  let start = 0;
  for (const seam of text.matchAll(SEAM)) {
    const end = seam.index + 2;
    if (end > start) pieces.push(text.slice(start, end));
    start = end;
  }
  pieces.push(text.slice(start));
  return pieces;
}

/**
 * A Chat Completions message in the shape the counter knows: an assistant turn with several tool
 * calls counts as one function call per call (what the model wrote), a tool result as its content.
 */
function toCountedMessages(message: ChatCompletionMessageParam): ChatMessage[] {
  const content = typeof message.content === "string" ? message.content : "";
  if (message.role === "assistant" && message.tool_calls && message.tool_calls.length > 0) {
    return message.tool_calls.map((call) =>
      call.type === "function"
        ? {
            role: "assistant",
            content: "",
            function_call: { name: call.function.name, arguments: call.function.arguments },
          }
        : { role: "assistant", content: "" },
    );
  }
  return [{ role: message.role, content }];
}
