// Least-privilege credentials for tool calls: each token names one session (subject), one service
// (audience) and only the scope of the one method called, and expires with the call's deadline
// (plus a little clock skew). A token seen by one tool is useless at any other, and for any other
// session or method. Cached per session and method while it covers the whole of a new call — but
// for an irreversible method: that token is minted per call, bound to the exact request sent
// (claim `req`), so the tool refuses it for any other amount, entity or key.
import type { Message } from "@bufbuild/protobuf";
import { Effect, mintToken, requestDigest, type SigningKey } from "@loopguard/tool-sdk";
import { LRUCache } from "lru-cache";
import type { RegisteredTool } from "../tool-registry.js";

/** Allowance for clocks of the orchestrator and the tool disagreeing. */
export const TOKEN_CLOCK_SKEW_MS = 5_000;

export class ToolTokens {
  readonly #key: SigningKey;
  readonly #cache = new LRUCache<string, { readonly token: string; readonly expiresAt: number }>({ max: 10_000 });

  constructor(key: SigningKey) {
    this.#key = key;
  }

  /**
   * A token for one call of `tool` by session `sessionId` that ends by `deadline` (epoch ms).
   * `request`, the message about to be sent, is required for an irreversible tool: its token is
   * bound to it and never reused.
   */
  async for(sessionId: string, tool: RegisteredTool, deadline: number, request?: Message): Promise<string> {
    const expiresAt = Math.ceil((deadline + TOKEN_CLOCK_SKEW_MS) / 1000) * 1000;
    const options = {
      subject: `session:${sessionId}`,
      audience: tool.tool,
      scopes: tool.requiredScope ? [tool.requiredScope] : [],
      expiresAt,
    };
    if (tool.effect === Effect.IRREVERSIBLE_EXTERNAL) {
      if (!request)
        throw new Error(`${tool.name} is irreversible: its token is bound to the request, so pass the request`);
      return mintToken(this.#key, { ...options, requestDigest: requestDigest(tool.method.input, request as never) });
    }
    const cacheKey = `${sessionId}\n${tool.name}`;
    const hit = this.#cache.get(cacheKey);
    if (hit && hit.expiresAt >= deadline) return hit.token;
    const token = await mintToken(this.#key, options);
    this.#cache.set(cacheKey, { token, expiresAt });
    return token;
  }
}
