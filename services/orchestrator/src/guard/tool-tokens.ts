// Least-privilege credentials for tool calls: each names one session (subject), one service
// (audience), the one method called (claim `mth`, which the tool checks) and only its scope, and
// expires with the call's deadline (plus a little clock skew). One seen by one tool is useless at
// any other, and for any other session or method. Cached per session and method while it covers
// the whole of a new call, skew allowance included — but for an irreversible method: that one is
// minted per call, bound to the exact request sent (claim `req`), so the tool refuses it for any
// other amount, entity or key.
// With call secrets (LOOPGUARD_CALL_SECRETS_FILE) a credential is an HS256 JWT under the tool's own
// derived key, minted in microseconds (see call-keys.ts in the tool SDK); without them, an Ed25519
// JWT signed with the orchestrator's key, which every tool verifies with the JWKS.
import type { Message } from "@bufbuild/protobuf";
import {
  CallCredentials,
  type CallKey,
  Effect,
  FollowedFile,
  type KeysReload,
  methodPath,
  mintToken,
  readCallKeys,
  requestDigest,
  type SigningKey,
  TOKEN_CLOCK_SKEW_MS,
} from "@loopguard/tool-sdk";
import { LRUCache } from "lru-cache";
import type { RegisteredTool } from "../tool-registry.js";

/** The orchestrator's call secrets and the file they came from, followed so a rotation needs no restart. */
export interface CallSecrets {
  readonly file: string;
  readonly secrets: readonly CallKey[];
}

export class ToolTokens {
  readonly #key: SigningKey;
  readonly #calls: FollowedFile<CallCredentials> | undefined;
  #mintedWith: CallCredentials | undefined;
  readonly #cache = new LRUCache<string, { readonly token: string; readonly expiresAt: number }>({ max: 10_000 });

  constructor(key: SigningKey, calls?: CallSecrets, onReload?: (outcome: KeysReload) => void) {
    this.#key = key;
    if (calls) {
      this.#calls = new FollowedFile(
        calls.file,
        new CallCredentials(calls.secrets),
        (value) => new CallCredentials(readCallKeys(value)),
        (outcome) => onReload?.("error" in outcome ? outcome : { kids: [outcome.value.kid] }),
      );
    }
  }

  /**
   * A credential for one call of `tool` by session `sessionId` that ends by `deadline` (epoch ms).
   * `request`, the message about to be sent, is required for an irreversible tool: its credential
   * is bound to it and never reused.
   */
  async for(sessionId: string, tool: RegisteredTool, deadline: number, request?: Message): Promise<string> {
    const expiresAt = Math.ceil((deadline + TOKEN_CLOCK_SKEW_MS) / 1000) * 1000;
    const options = {
      subject: `session:${sessionId}`,
      audience: tool.tool,
      method: methodPath(tool.method),
      scopes: tool.requiredScope ? [tool.requiredScope] : [],
      expiresAt,
    };
    const calls = this.#calls?.current();
    if (calls !== this.#mintedWith) {
      // The secret in use changed (a rotation): credentials made before are not handed out again.
      this.#cache.clear();
      this.#mintedWith = calls;
    }
    if (tool.effect === Effect.IRREVERSIBLE_EXTERNAL) {
      if (!request)
        throw new Error(`${tool.name} is irreversible: its token is bound to the request, so pass the request`);
      const bound = { ...options, requestDigest: requestDigest(tool.method.input, request as never) };
      return calls ? calls.mint(bound) : mintToken(this.#key, bound);
    }
    const cacheKey = `${sessionId}\n${tool.name}`;
    const hit = this.#cache.get(cacheKey);
    // A tool whose clock is ahead by up to the allowance must still take it until the deadline.
    if (hit && hit.expiresAt >= deadline + TOKEN_CLOCK_SKEW_MS) return hit.token;
    const token = calls ? calls.mint(options) : await mintToken(this.#key, options);
    this.#cache.set(cacheKey, { token, expiresAt });
    return token;
  }
}
