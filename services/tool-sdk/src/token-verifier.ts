// Verifies bearer tokens: a call credential made with this tool's own key (the orchestrator's tool
// calls, see call-keys.ts), or a token signed by a trusted Ed25519 key (people, probes, and an
// orchestrator without call secrets) — signature, issuer, audience (this service), expiry, and the
// key's binding (subject and scopes). Follows the key files it was given, so a key revoked, removed
// or added there takes effect within about a second, without a restart.
import { decodeProtectedHeader, type JWTPayload, jwtVerify } from "jose";
import { type Caller, CredentialsError, credentialsErrorOf, echoedKid, TOKEN_ALGORITHM, TOKEN_ISSUER } from "./auth.js";
import { CALL_KEY_ALGORITHM, type CallKey, CallKeyChecker, readCallKeys } from "./call-keys.js";
import { FollowedFile } from "./followed-file.js";
import { envPrefixOf } from "./config.js";
import { type BoundKeySet, scopeBeyond, subjectAllowed, type TrustedKey, trustedKeys } from "./key-bindings.js";
import type { Logger } from "./logger.js";
import { type OidcSettings, OidcVerifier } from "./oidc.js";

/** What happened when a followed key file changed: the kids now trusted, or why the new file was not taken. */
export type KeysReload = { readonly kids: readonly string[] } | { readonly error: string };

export interface TokenVerifierOptions {
  /** The JWKS file to follow: looked at (one stat) at most once a second, on verify, and re-read when it changed. */
  readonly file?: string;
  /** This tool's call keys (its <PREFIX>_CALL_KEYS_FILE), read at start and followed like the JWKS. */
  readonly callKeys?: { readonly file: string; readonly keys: readonly CallKey[] };
  /** People signed in with an OpenID Connect provider (the orchestrator only). */
  readonly oidc?: OidcVerifier;
  readonly onReload?: (outcome: KeysReload) => void;
}

const MAX_CACHED = 10_000;

/** Whom a service trusts to call it: its JWKS (and the file to follow), its call keys, an OIDC provider. */
export interface CallerTrust {
  readonly publicKeys: BoundKeySet;
  readonly publicKeysFile?: string;
  readonly callKeys?: { readonly file: string; readonly keys: readonly CallKey[] };
  readonly oidc?: OidcSettings;
}

/** The verifier of the callers of `audience`, logging each reload of the keys it follows. */
export function callerVerifier(audience: string, trust: CallerTrust, log: Logger): TokenVerifier {
  return new TokenVerifier(trust.publicKeys, audience, {
    ...(trust.publicKeysFile ? { file: trust.publicKeysFile } : {}),
    ...(trust.callKeys ? { callKeys: trust.callKeys } : {}),
    ...(trust.oidc ? { oidc: new OidcVerifier(trust.oidc) } : {}),
    onReload: (outcome) =>
      "error" in outcome
        ? log.error("trusted keys not reloaded", { reason: outcome.error })
        : log.warn("trusted keys reloaded", { kids: outcome.kids }),
  });
}

function scopesOf(payload: JWTPayload): string[] {
  return typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : [];
}

export class TokenVerifier {
  readonly #keys: { current(now: number): ReadonlyMap<string, TrustedKey> };
  readonly #callKeys: { current(now: number): CallKeyChecker } | undefined;
  readonly #audience: string;
  readonly #oidc: OidcVerifier | undefined;
  /** The keys the cache was filled with: when either set changes, the cache is emptied. */
  #cachedWith: [ReadonlyMap<string, TrustedKey>, CallKeyChecker | undefined] | undefined;
  // Verified tokens are cached until they expire: a caller's token is reused for many calls and a
  // signature check per call is wasted work. The key is the whole token, so a cached entry only
  // ever answers for the exact bytes that verified. Emptied when the keys change.
  readonly #cache = new Map<string, { caller: Caller; expiresAt: number }>();

  /** `audience`: the tool name of the service this verifier guards; tokens for any other are refused. */
  constructor(keys: BoundKeySet, audience: string, options: TokenVerifierOptions = {}) {
    this.#audience = audience;
    this.#oidc = options.oidc;
    const report = (outcome: KeysReload) => options.onReload?.(outcome);
    const trusted = trustedKeys(keys);
    this.#keys =
      options.file === undefined
        ? { current: () => trusted }
        : new FollowedFile(
            options.file,
            trusted,
            (value) => trustedKeys(value as BoundKeySet),
            (outcome) => report("error" in outcome ? outcome : { kids: [...outcome.value.keys()] }),
          );
    const call = options.callKeys;
    if (call) {
      // Named by its variable, never its path: a refusal goes to callers who hold no credential at all.
      const source = `${envPrefixOf(audience)}_CALL_KEYS_FILE`;
      const checker = (keys: readonly CallKey[]) => new CallKeyChecker(keys, audience, source);
      this.#callKeys = new FollowedFile(
        call.file,
        checker(call.keys),
        (value) => checker(readCallKeys(value, audience)),
        (outcome) => report("error" in outcome ? outcome : { kids: outcome.value.kids }),
      );
    }
  }

  /** The caller a bearer token stands for; throws CredentialsError when it is missing, malformed, expired, forged, for another service or beyond its key. */
  async verify(token: string): Promise<Caller> {
    const now = Date.now();
    const keys = this.#keys.current(now);
    const callKeys = this.#callKeys?.current(now);
    const cachedWith = this.#cachedWith;
    if (cachedWith?.[0] !== keys || cachedWith[1] !== callKeys) {
      this.#cache.clear();
      this.#cachedWith = [keys, callKeys];
    }
    const hit = this.#cache.get(token);
    if (hit && hit.expiresAt > now) return hit.caller;
    const checked = callKeys?.check(token, now);
    if (checked) return this.#cached(token, checked, keys);
    const oidc = this.#oidc;
    return this.#cached(
      token,
      oidc?.issued(token) ? await oidc.verify(token) : await this.#verifyOwn(token, keys),
      keys,
    );
  }

  /** Caches what verified — unless the keys changed while it was being verified. */
  #cached(
    token: string,
    verified: { caller: Caller; expiresAt: number },
    keys: ReadonlyMap<string, TrustedKey>,
  ): Caller {
    if (this.#cachedWith?.[0] === keys) {
      if (this.#cache.size > MAX_CACHED) this.#cache.clear();
      this.#cache.set(token, verified);
    }
    return verified.caller;
  }

  async #verifyOwn(
    token: string,
    keys: ReadonlyMap<string, TrustedKey>,
  ): Promise<{ caller: Caller; expiresAt: number }> {
    // The orchestrator's call credential at a tool not given the keys to check it: a setting
    // missing, which "malformed" would hide from whoever is paged.
    if (this.#callKeys === undefined && headerAlgorithm(token) === CALL_KEY_ALGORITHM)
      throw new CredentialsError(
        `the bearer token is the orchestrator's call credential, but ${this.#audience} was given no call keys to check it (${envPrefixOf(this.#audience)}_CALL_KEYS_FILE)`,
      );
    let used: TrustedKey | undefined;
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(
        token,
        (header) => {
          used = header.kid === undefined ? undefined : keys.get(header.kid);
          if (!used)
            throw new CredentialsError(
              header.kid === undefined
                ? "the bearer token names no key (kid)"
                : `the bearer token's key ${echoedKid(header.kid)} is not trusted (unknown or revoked)`,
            );
          return used.key;
        },
        {
          issuer: TOKEN_ISSUER,
          audience: this.#audience,
          algorithms: [TOKEN_ALGORITHM],
          requiredClaims: ["sub", "exp", "iat"],
        },
      ));
    } catch (error) {
      throw credentialsErrorOf(error, this.#audience);
    }
    // jose takes an audience list that holds this one: a token naming several services would be
    // good at each of them, and one taken from one service could be spent at the others.
    if (payload.aud !== this.#audience)
      throw new CredentialsError(`the bearer token must name one audience, "${this.#audience}" (it names several)`);
    const key = used!;
    const subject = payload.sub ?? "";
    if (!subjectAllowed(key.binding, subject))
      throw new CredentialsError(`key ${key.kid} may sign only for subject "${key.binding.subject}", not "${subject}"`);
    const scopes = scopesOf(payload);
    const beyond = scopeBeyond(key, scopes);
    if (beyond !== undefined) throw new CredentialsError(`key ${key.kid} may not sign scope "${beyond}"`);
    const expiresAt = (payload.exp ?? 0) * 1000;
    const caller: Caller = {
      subject,
      scopes: new Set(scopes),
      role: key.binding.role,
      keyId: key.kid,
      ...(typeof payload.req === "string" ? { requestDigest: payload.req } : {}),
      ...(typeof payload.why === "string" ? { breakGlassReason: payload.why } : {}),
      ...(typeof payload.mth === "string" ? { method: payload.mth } : {}),
      // Both required above; a break-glass token's lifetime is judged from them (bindingStage).
      issuedAt: (payload.iat ?? 0) * 1000,
      expiresAt,
    };
    return { caller, expiresAt };
  }
}

/** A token's header's `alg`, or undefined when it has no readable header. */
function headerAlgorithm(token: string): unknown {
  try {
    return decodeProtectedHeader(token).alg;
  } catch {
    return undefined;
  }
}
