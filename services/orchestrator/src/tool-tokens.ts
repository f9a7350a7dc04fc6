// Least-privilege credentials for tool calls: each token names one session (subject), one service
// (audience) and only the scope of the one method called, and expires with the call's deadline
// (plus a little clock skew). A token seen by one tool is useless at any other, and for any other
// session or method. Cached per session and method while it covers the whole of a new call.
import { mintToken, type SigningKey } from "@loopguard/tool-sdk";
import { LRUCache } from "lru-cache";
import type { RegisteredTool } from "./tool-registry.js";

/** Allowance for clocks of the orchestrator and the tool disagreeing. */
export const TOKEN_CLOCK_SKEW_MS = 5_000;

export class ToolTokens {
  readonly #key: SigningKey;
  readonly #cache = new LRUCache<string, { readonly token: string; readonly expiresAt: number }>({ max: 10_000 });

  constructor(key: SigningKey) {
    this.#key = key;
  }

  /** A token for one call of `tool` by session `sessionId` that ends by `deadline` (epoch ms). */
  async for(sessionId: string, tool: RegisteredTool, deadline: number): Promise<string> {
    const cacheKey = `${sessionId}\n${tool.name}`;
    const hit = this.#cache.get(cacheKey);
    if (hit && hit.expiresAt >= deadline) return hit.token;
    const expiresAt = Math.ceil((deadline + TOKEN_CLOCK_SKEW_MS) / 1000) * 1000;
    const token = await mintToken(this.#key, {
      subject: `session:${sessionId}`,
      audience: tool.tool,
      scopes: tool.requiredScope ? [tool.requiredScope] : [],
      expiresAt,
    });
    this.#cache.set(cacheKey, { token, expiresAt });
    return token;
  }
}
