// Verifies bearer tokens: signature by a trusted key, issuer, audience (this service), expiry, and
// the key's binding (subject and scopes). Follows the JWKS file it was given, so a key revoked or
// added there takes effect within about a second, without a restart.
import { readFileSync, statSync } from "node:fs";
import { type JWTPayload, jwtVerify } from "jose";
import { type Caller, CredentialsError, credentialsErrorOf, TOKEN_ALGORITHM, TOKEN_ISSUER } from "./auth.js";
import { type BoundKeySet, scopeBeyond, subjectAllowed, type TrustedKey, trustedKeys } from "./key-bindings.js";
import type { OidcVerifier } from "./oidc.js";

/** What happened when the followed JWKS file changed: the kids now trusted, or why the new file was not taken. */
export type KeysReload = { readonly kids: readonly string[] } | { readonly error: string };

export interface TokenVerifierOptions {
  /** The JWKS file to follow: looked at (one stat) at most once a second, on verify, and re-read when it changed. */
  readonly file?: string;
  /** People signed in with an OpenID Connect provider (the orchestrator only). */
  readonly oidc?: OidcVerifier;
  readonly onReload?: (outcome: KeysReload) => void;
}

const RELOAD_CHECK_MS = 1000;
const MAX_CACHED = 10_000;

function scopesOf(payload: JWTPayload): string[] {
  return typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : [];
}

export class TokenVerifier {
  #keys: ReadonlyMap<string, TrustedKey>;
  readonly #audience: string;
  readonly #options: TokenVerifierOptions;
  /** inode, size and mtime of the file when last read; unset so that the first check reads it. */
  #stamp: string | undefined;
  #nextCheck = 0;
  /** Bumped when the keys change, so a verification begun with the old keys is not cached. */
  #generation = 0;
  // Verified tokens are cached until they expire: a caller's token is reused for many calls and a
  // signature check per call is wasted work. The key is the whole token, so a cached entry only
  // ever answers for the exact bytes that verified. Emptied when the keys change.
  readonly #cache = new Map<string, { caller: Caller; expiresAt: number }>();

  /** `audience`: the tool name of the service this verifier guards; tokens for any other are refused. */
  constructor(keys: BoundKeySet, audience: string, options: TokenVerifierOptions = {}) {
    this.#keys = trustedKeys(keys);
    this.#audience = audience;
    this.#options = options;
  }

  /** The caller a bearer token stands for; throws CredentialsError when it is missing, malformed, expired, forged, for another service or beyond its key. */
  async verify(token: string): Promise<Caller> {
    const now = Date.now();
    if (this.#options.file !== undefined && now >= this.#nextCheck) this.#follow(this.#options.file, now);
    const hit = this.#cache.get(token);
    if (hit && hit.expiresAt > now) return hit.caller;
    const generation = this.#generation;
    const oidc = this.#options.oidc;
    const { caller, expiresAt } = oidc?.issued(token) ? await oidc.verify(token) : await this.#verifyOwn(token);
    if (generation === this.#generation) {
      if (this.#cache.size > MAX_CACHED) this.#cache.clear();
      this.#cache.set(token, { caller, expiresAt });
    }
    return caller;
  }

  async #verifyOwn(token: string): Promise<{ caller: Caller; expiresAt: number }> {
    const keys = this.#keys;
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
                : `the bearer token's key ${header.kid} is not trusted (unknown or revoked)`,
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
    const key = used!;
    const subject = payload.sub ?? "";
    if (!subjectAllowed(key.binding, subject))
      throw new CredentialsError(`key ${key.kid} may sign only for subject "${key.binding.subject}", not "${subject}"`);
    const scopes = scopesOf(payload);
    const beyond = scopeBeyond(key, scopes);
    if (beyond !== undefined) throw new CredentialsError(`key ${key.kid} may not sign scope "${beyond}"`);
    const caller: Caller = {
      subject,
      scopes: new Set(scopes),
      role: key.binding.role,
      keyId: key.kid,
      ...(typeof payload.req === "string" ? { requestDigest: payload.req } : {}),
      ...(typeof payload.why === "string" ? { breakGlassReason: payload.why } : {}),
    };
    return { caller, expiresAt: (payload.exp ?? 0) * 1000 };
  }

  /** Re-reads the followed file when it changed; a file that does not check keeps the keys trusted so far. */
  #follow(file: string, now: number): void {
    this.#nextCheck = now + RELOAD_CHECK_MS;
    let stamp: string;
    try {
      const stat = statSync(file);
      stamp = `${stat.ino}:${stat.size}:${stat.mtimeMs}`;
    } catch (error) {
      stamp = `unreadable:${(error as NodeJS.ErrnoException).code ?? "error"}`;
    }
    if (stamp === this.#stamp) return;
    const first = this.#stamp === undefined;
    this.#stamp = stamp;
    let keys: ReadonlyMap<string, TrustedKey>;
    try {
      keys = trustedKeys(JSON.parse(readFileSync(file, "utf8")));
    } catch (error) {
      this.#options.onReload?.({
        error: `${file}: ${error instanceof SyntaxError ? "not JSON" : (error as Error).message}; the keys trusted so far stay`,
      });
      return;
    }
    this.#keys = keys;
    this.#generation += 1;
    this.#cache.clear();
    if (!first) this.#options.onReload?.({ kids: [...keys.keys()] });
  }
}
