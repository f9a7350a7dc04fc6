// Caller credentials: a short-lived JWT (HS256, verified with jose) carrying the caller's
// scopes, sent as "authorization: Bearer …". The signing secret comes from config
// (LOOPGUARD_AUTH_SECRET, or LOOPGUARD_AUTH_SECRET_FILE for a mounted Kubernetes secret).
import { jwtVerify, SignJWT } from "jose";

export const TOKEN_ISSUER = "loopguard";
export const TOKEN_AUDIENCE = "loopguard-tools";

export interface Caller {
  /** Who is calling, e.g. "orchestrator" or "session:ses_…". */
  readonly subject: string;
  readonly scopes: ReadonlySet<string>;
}

export interface MintOptions {
  readonly subject: string;
  readonly scopes: readonly string[];
  readonly ttlSeconds?: number;
}

function keyOf(secret: string): Uint8Array {
  if (secret.length < 32) throw new Error("the auth secret must be at least 32 characters");
  return new TextEncoder().encode(secret);
}

export async function mintToken(secret: string, options: MintOptions): Promise<string> {
  return new SignJWT({ scope: options.scopes.join(" ") })
    .setProtectedHeader({ alg: "HS256" })
    .setSubject(options.subject)
    .setIssuer(TOKEN_ISSUER)
    .setAudience(TOKEN_AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(`${options.ttlSeconds ?? 300}s`)
    .sign(keyOf(secret));
}

export class TokenVerifier {
  readonly #key: Uint8Array;
  // Verified tokens are cached until they expire: a session reuses its token for many calls and
  // an HMAC check per call is wasted work.
  readonly #cache = new Map<string, { caller: Caller; expiresAt: number }>();

  constructor(secret: string) {
    this.#key = keyOf(secret);
  }

  /** The caller a bearer token stands for; throws when it is missing, malformed, expired or forged. */
  async verify(token: string): Promise<Caller> {
    const now = Date.now();
    const hit = this.#cache.get(token);
    if (hit && hit.expiresAt > now) return hit.caller;
    const { payload } = await jwtVerify(token, this.#key, {
      issuer: TOKEN_ISSUER,
      audience: TOKEN_AUDIENCE,
      algorithms: ["HS256"],
      requiredClaims: ["sub", "exp"],
    });
    const scopes = typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : [];
    const caller: Caller = { subject: payload.sub ?? "", scopes: new Set(scopes) };
    if (this.#cache.size > 10_000) this.#cache.clear();
    this.#cache.set(token, { caller, expiresAt: (payload.exp ?? 0) * 1000 });
    return caller;
  }
}
