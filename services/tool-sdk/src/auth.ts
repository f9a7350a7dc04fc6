// Caller credentials: short-lived JWTs signed with Ed25519 (EdDSA, via jose), sent as
// "authorization: Bearer …". Only the holder of a private key can mint one (the orchestrator for
// tool calls; the local CLI and `pnpm mint-token` with an operator key); every service verifies
// with public keys only (a JWKS), so a compromised tool cannot mint anything. Each token names its
// audience — the one service that may accept it — so a token captured at one service is useless at
// another. Several public keys (by `kid`) may be trusted at once, for key rotation.
import { createPrivateKey, createPublicKey, generateKeyPairSync, type JsonWebKey as NodeJwk, type KeyObject, randomUUID } from "node:crypto";
import { createLocalJWKSet, type JSONWebKeySet, type JWK, jwtVerify, SignJWT } from "jose";

export const TOKEN_ISSUER = "loopguard";
export const TOKEN_ALGORITHM = "EdDSA";

export interface Caller {
  /** Who is calling, e.g. "session:ses_…" (a tool call) or "cli:alice" (an operator). */
  readonly subject: string;
  readonly scopes: ReadonlySet<string>;
}

/** A private key that signs tokens, with the key id its public half is published under. */
export interface SigningKey {
  readonly kid: string;
  readonly key: KeyObject;
}

export interface MintOptions {
  readonly subject: string;
  /** The service that may accept the token: its contract's tool name, e.g. "billing". */
  readonly audience: string;
  readonly scopes: readonly string[];
  /** Lifetime from now; ignored when `expiresAt` is given. Default 300 s. */
  readonly ttlSeconds?: number;
  /** Absolute expiry, epoch milliseconds (rounded up to the next second). */
  readonly expiresAt?: number;
}

export class KeyError extends Error {
  override readonly name = "KeyError";
}

function isEd25519(jwk: Record<string, unknown>): boolean {
  return jwk.kty === "OKP" && jwk.crv === "Ed25519" && typeof jwk.x === "string";
}

/** The private signing key of a JWK (OKP / Ed25519 with `d` and a `kid`). */
export function signingKeyFromJwk(value: unknown): SigningKey {
  const jwk = value as Record<string, unknown>;
  if (!jwk || typeof jwk !== "object" || !isEd25519(jwk) || typeof jwk.d !== "string") {
    throw new KeyError("the signing key must be a private Ed25519 JWK (kty OKP, crv Ed25519, with x and d)");
  }
  if (typeof jwk.kid !== "string" || jwk.kid === "") throw new KeyError("the signing key must have a kid (its public key is found by it)");
  try {
    return { kid: jwk.kid, key: createPrivateKey({ key: jwk as NodeJwk, format: "jwk" }) };
  } catch (cause) {
    throw new KeyError("the signing key is not a valid Ed25519 private key", { cause });
  }
}

/**
 * The trusted public keys, checked: every key an Ed25519 public JWK with a unique `kid`, none
 * carrying private material (a JWKS holding a private key would hand every service the power to mint).
 */
export function publicKeySet(value: unknown): JSONWebKeySet {
  const keys = (value as { keys?: unknown })?.keys;
  if (!Array.isArray(keys) || keys.length === 0) throw new KeyError('a JWKS is a JSON object {"keys": [...]} with at least one key');
  const kids = new Set<string>();
  for (const [i, key] of keys.entries()) {
    const jwk = key as Record<string, unknown>;
    if (!jwk || typeof jwk !== "object" || !isEd25519(jwk)) throw new KeyError(`key ${i} of the JWKS is not an Ed25519 public key (kty OKP, crv Ed25519)`);
    if ("d" in jwk) throw new KeyError(`key ${i} of the JWKS holds private material ("d"); publish public keys only`);
    if (typeof jwk.kid !== "string" || jwk.kid === "") throw new KeyError(`key ${i} of the JWKS has no kid`);
    if (kids.has(jwk.kid)) throw new KeyError(`two keys of the JWKS share the kid "${jwk.kid}"`);
    kids.add(jwk.kid);
    try {
      createPublicKey({ key: jwk as NodeJwk, format: "jwk" });
    } catch (cause) {
      throw new KeyError(`key ${jwk.kid} of the JWKS is not a valid Ed25519 public key`, { cause });
    }
  }
  return { keys: keys.map((k) => ({ ...(k as JWK), alg: TOKEN_ALGORITHM, use: "sig" })) };
}

/** A new Ed25519 key pair as JWKs: the private one signs, the public one goes into a JWKS. */
export function newKeyPair(kid: string): { readonly privateJwk: JWK; readonly publicJwk: JWK } {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const common = { kid, alg: TOKEN_ALGORITHM, use: "sig" };
  return {
    privateJwk: { ...(privateKey.export({ format: "jwk" }) as JWK), ...common },
    publicJwk: { ...(publicKey.export({ format: "jwk" }) as JWK), ...common },
  };
}

export async function mintToken(key: SigningKey, options: MintOptions): Promise<string> {
  const expiresAt = options.expiresAt !== undefined ? Math.ceil(options.expiresAt / 1000) : `${options.ttlSeconds ?? 300}s`;
  return new SignJWT({ scope: options.scopes.join(" ") })
    .setProtectedHeader({ alg: TOKEN_ALGORITHM, kid: key.kid, typ: "JWT" })
    .setSubject(options.subject)
    .setIssuer(TOKEN_ISSUER)
    .setAudience(options.audience)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime(expiresAt)
    .sign(key.key);
}

export class TokenVerifier {
  readonly #keys: ReturnType<typeof createLocalJWKSet>;
  readonly #audience: string;
  // Verified tokens are cached until they expire: an operator's token is reused for many calls
  // and a signature check per call is wasted work. The key is the whole token, so a cached entry
  // only ever answers for the exact bytes that verified.
  readonly #cache = new Map<string, { caller: Caller; expiresAt: number }>();

  /** `audience`: the tool name of the service this verifier guards; tokens for any other are refused. */
  constructor(keys: JSONWebKeySet, audience: string) {
    this.#keys = createLocalJWKSet(publicKeySet(keys));
    this.#audience = audience;
  }

  /** The caller a bearer token stands for; throws when it is missing, malformed, expired, forged or for another service. */
  async verify(token: string): Promise<Caller> {
    const now = Date.now();
    const hit = this.#cache.get(token);
    if (hit && hit.expiresAt > now) return hit.caller;
    const { payload } = await jwtVerify(token, this.#keys, {
      issuer: TOKEN_ISSUER,
      audience: this.#audience,
      algorithms: [TOKEN_ALGORITHM],
      requiredClaims: ["sub", "exp", "iat"],
    });
    const scopes = typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : [];
    const caller: Caller = { subject: payload.sub ?? "", scopes: new Set(scopes) };
    if (this.#cache.size > 10_000) this.#cache.clear();
    this.#cache.set(token, { caller, expiresAt: (payload.exp ?? 0) * 1000 });
    return caller;
  }
}
