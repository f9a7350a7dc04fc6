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
  type CallError,
  type CallKey,
  Effect,
  FollowedFile,
  type KeysReload,
  methodPath,
  mintToken,
  readCallKeys,
  requestDigest,
  type SigningKey,
  status,
  TOKEN_CLOCK_SKEW_MS,
  UNKNOWN_CALL_KEY,
} from "@loopguard/tool-sdk";
import { LRUCache } from "lru-cache";
import type { RegisteredTool } from "../tool-registry.js";

/** The orchestrator's call secrets and the file they came from, followed so a rotation needs no restart. */
export interface CallSecrets {
  readonly file: string;
  readonly secrets: readonly CallKey[];
}

/**
 * How long a tool that refused the call key minted with (UNKNOWN_CALL_KEY) gets credentials under the
 * next key held instead: a rotation's new key reaches the orchestrator before a tool (each pod's
 * Secret is updated by its kubelet, within about a minute), and calls go on meanwhile.
 */
export const REFUSED_KEY_MS = 60_000;

export class ToolTokens {
  readonly #key: SigningKey;
  readonly #calls: FollowedFile<CallCredentials> | undefined;
  #mintedWith: CallCredentials | undefined;
  readonly #cache = new LRUCache<string, { readonly token: string; readonly expiresAt: number }>({ max: 10_000 });
  /** By tool: the call key it refused, and until when another is used for it. */
  readonly #refused = new Map<string, { readonly kid: string; readonly until: number }>();

  /**
   * @param onReload told each reload of the call secrets' file
   * @param onKeyRefused told a tool that refused the key minted with, and the key used for it instead
   */
  constructor(
    key: SigningKey,
    calls?: CallSecrets,
    onReload?: (outcome: KeysReload) => void,
    private readonly onKeyRefused?: (tool: string, refused: string, instead: string) => void,
  ) {
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
    const kid = calls && this.#kidFor(calls, tool.tool);
    if (tool.effect === Effect.IRREVERSIBLE_EXTERNAL) {
      if (!request)
        throw new Error(`${tool.name} is irreversible: its token is bound to the request, so pass the request`);
      const bound = { ...options, requestDigest: requestDigest(tool.method.input, request as never) };
      return calls ? calls.mint(bound, kid) : mintToken(this.#key, bound);
    }
    const cacheKey = `${sessionId}\n${tool.name}\n${kid}`;
    const hit = this.#cache.get(cacheKey);
    // A tool whose clock is ahead by up to the allowance must still take it until the deadline.
    if (hit && hit.expiresAt >= deadline + TOKEN_CLOCK_SKEW_MS) return hit.token;
    const token = calls ? calls.mint(options, kid) : await mintToken(this.#key, options);
    this.#cache.set(cacheKey, { token, expiresAt });
    return token;
  }

  /**
   * Takes `error`, a call's failure at `tool`: when the tool refused the call key credentials are
   * minted with for it as one it does not hold, and another key is held, credentials for it are
   * minted under the next key for REFUSED_KEY_MS, and true is returned: the call may be sent again
   * at once (it was refused before anything ran).
   */
  refusedKey(tool: string, error: CallError, now = Date.now()): boolean {
    const calls = this.#calls?.current();
    const refused = error.code === status.UNAUTHENTICATED ? error.metadata[UNKNOWN_CALL_KEY] : undefined;
    if (!calls || refused === undefined || !calls.kids.includes(refused)) return false;
    // A call minted before another call's refusal moved this tool on: sent again under the key now used.
    const current = this.#kidFor(calls, tool, now);
    if (refused !== current) return calls.kids.indexOf(refused) < calls.kids.indexOf(current);
    const instead = calls.kids[calls.kids.indexOf(refused) + 1];
    if (instead === undefined) return false;
    this.#refused.set(tool, { kid: refused, until: now + REFUSED_KEY_MS });
    this.onKeyRefused?.(tool, refused, instead);
    return true;
  }

  /** The key to mint `tool`'s credentials with: the first held, or past the ones it refused lately. */
  #kidFor(calls: CallCredentials, tool: string, now = Date.now()): string {
    let kid = calls.kid;
    const refused = this.#refused.get(tool);
    if (refused === undefined) return kid;
    if (refused.until <= now) {
      this.#refused.delete(tool);
      return kid;
    }
    // The refused key and those before it are passed over while the mark lasts.
    const past = calls.kids.indexOf(refused.kid);
    if (past >= 0 && past + 1 < calls.kids.length) kid = calls.kids[past + 1]!;
    return kid;
  }
}
