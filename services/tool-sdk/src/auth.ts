// Caller credentials: short-lived JWTs signed with Ed25519 (EdDSA, via jose), sent as
// "authorization: Bearer …". Only the holder of a private key can mint one (the orchestrator for
// tool calls; each person with their own key for the CLI and `pnpm mint-token`); every service
// verifies with public keys only (a JWKS whose keys are bound to who may use them, see
// key-bindings.ts), so a compromised tool cannot mint anything. Each token names its audience —
// the one service that may accept it — so a token captured at one service is useless at another.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type JsonWebKey as NodeJwk,
  type KeyObject,
  randomUUID,
} from "node:crypto";
import { type DescMessage, type MessageShape, toJson } from "@bufbuild/protobuf";
import canonicalize from "canonicalize";
import { errors as joseErrors, type JWK, SignJWT } from "jose";

export const TOKEN_ISSUER = "loopguard";
export const TOKEN_ALGORITHM = "EdDSA";
/** Allowance for the clocks of a token's minter and its verifier disagreeing. */
export const TOKEN_CLOCK_SKEW_MS = 5_000;
/** A break-glass token lives at most this long (exp − iat): long enough for one deliberate call. */
export const BREAK_GLASS_MAX_TTL_SECONDS = 900;
/** A break-glass token's reason (`why`), recorded with every use, is at most this long. */
export const BREAK_GLASS_MAX_REASON_CHARS = 200;

/**
 * What is wrong with a break-glass reason, or undefined: one line of text, 1..200 characters. The
 * tool that honours the token and `pnpm mint-token` that makes it say the same.
 */
export function breakGlassReasonProblem(reason: string): string | undefined {
  if (!reason.trim()) return 'a break-glass token must say why (mint it with --reason "…")';
  if (reason.length > BREAK_GLASS_MAX_REASON_CHARS)
    return `a break-glass token's reason is at most ${BREAK_GLASS_MAX_REASON_CHARS} characters`;
  // Recorded with the refund it allows: a NUL would fail the record's insert on PostgreSQL, inside
  // the refund's transaction. Control characters are C0, DEL and C1.
  if (/\p{Cc}/u.test(reason)) return "a break-glass token's reason is one line of text, without control characters";
  return undefined;
}

/**
 * What a key is for: the orchestrator (tool calls of sessions), a person, a person's break-glass
 * key, or a probe (a release's synthetic checks), whose tokens every service accepts on read-only
 * methods only.
 */
export const KEY_ROLES = ["orchestrator", "person", "break-glass", "probe"] as const;
export type KeyRole = (typeof KEY_ROLES)[number];

export interface Caller {
  /** Who is calling, e.g. "session:ses_…" (a tool call), "approver" (a local person) or "oidc:…" (a person signed in). */
  readonly subject: string;
  readonly scopes: ReadonlySet<string>;
  /** The role of the key that signed the token ("person" for an OIDC ID token). */
  readonly role: KeyRole;
  /** The kid of that key ("oidc:<kid>" for an OIDC ID token). */
  readonly keyId: string;
  /** The token's `req` claim: the digest of the one request it may carry (see requestDigest). */
  readonly requestDigest?: string;
  /** The token's `why` claim: why a break-glass token was minted. */
  readonly breakGlassReason?: string;
  /** The token's `mth` claim: the one method it may call, its full gRPC path (see methodPath). */
  readonly method?: string;
  /** A signed token's `iat` and `exp`, epoch ms: a break-glass token's lifetime is checked from them. */
  readonly issuedAt?: number;
  readonly expiresAt?: number;
}

/** A token that verified but that its key (or issuer) may not issue; the message says why and may be sent to the caller. */
export class CredentialsError extends Error {
  override readonly name = "CredentialsError";

  /** The call key the credential names that this tool does not hold (sent back as UNKNOWN_CALL_KEY). */
  readonly unknownCallKey: string | undefined;

  constructor(message: string, options: ErrorOptions & { readonly unknownCallKey?: string | undefined } = {}) {
    super(message, options);
    this.unknownCallKey = options.unknownCallKey;
  }
}

/**
 * ErrorInfo metadata of a refused call credential that names a call key the tool does not hold: its
 * key id. The orchestrator then mints with another key it holds (a rotation whose new key reached it
 * before this tool).
 */
export const UNKNOWN_CALL_KEY = "unknown_call_key";

/** A token header's key id as a CredentialsError names it: the caller's text, so 64 characters of it at most. */
export function echoedKid(kid: unknown): string {
  const text = String(kid);
  return text.length > 64 ? `${text.slice(0, 64)}… (${text.length} characters)` : text;
}

/** A private key that signs tokens, with the key id its public half is published under. */
export interface SigningKey {
  readonly kid: string;
  readonly key: KeyObject;
}

export interface MintOptions {
  readonly subject: string;
  /** The service that may accept the token: its contract's tool name. */
  readonly audience: string;
  readonly scopes: readonly string[];
  /** Lifetime from now; ignored when `expiresAt` is given. Default 300 s. */
  readonly ttlSeconds?: number;
  /** Absolute expiry, epoch milliseconds (rounded up to the next second). */
  readonly expiresAt?: number;
  /** Binds the token to one request: claim `req`, the requestDigest of the exact message it may carry. */
  readonly requestDigest?: string;
  /** A break-glass token's reason: claim `why`. */
  readonly breakGlassReason?: string;
  /** Binds the token to one method: claim `mth`, its full gRPC path, e.g. "/loopguard.risk.v1.RiskService/QueryRisk". */
  readonly method?: string;
}

export class KeyError extends Error {
  override readonly name = "KeyError";
}

export function isEd25519(jwk: Record<string, unknown>): boolean {
  return jwk.kty === "OKP" && jwk.crv === "Ed25519" && typeof jwk.x === "string";
}

/** The private signing key of a JWK (OKP / Ed25519 with `d` and a `kid`). */
export function signingKeyFromJwk(value: unknown): SigningKey {
  const jwk = value as Record<string, unknown>;
  if (!jwk || typeof jwk !== "object" || !isEd25519(jwk) || typeof jwk.d !== "string") {
    throw new KeyError("the signing key must be a private Ed25519 JWK (kty OKP, crv Ed25519, with x and d)");
  }
  if (typeof jwk.kid !== "string" || jwk.kid === "")
    throw new KeyError("the signing key must have a kid (its public key is found by it)");
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: jwk as NodeJwk, format: "jwk" });
  } catch (cause) {
    throw new KeyError("the signing key is not a valid Ed25519 private key", { cause });
  }
  const signing = { kid: jwk.kid, key };
  // Node builds the key from d alone: an x of another pair would be published and never verify.
  if (publicXOf(signing) !== jwk.x) throw new KeyError("the signing key's x is not the public half of its d");
  return signing;
}

/** The public key (JWK x) of a signing key. */
export function publicXOf(signing: SigningKey): unknown {
  return createPublicKey(signing.key).export({ format: "jwk" }).x;
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
  const expiresAt =
    options.expiresAt !== undefined ? Math.ceil(options.expiresAt / 1000) : `${options.ttlSeconds ?? 300}s`;
  return new SignJWT({
    scope: options.scopes.join(" "),
    ...(options.requestDigest ? { req: options.requestDigest } : {}),
    ...(options.breakGlassReason ? { why: options.breakGlassReason } : {}),
    ...(options.method ? { mth: options.method } : {}),
  })
    .setProtectedHeader({ alg: TOKEN_ALGORITHM, kid: key.kid, typ: "JWT" })
    .setSubject(options.subject)
    .setIssuer(TOKEN_ISSUER)
    .setAudience(options.audience)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime(expiresAt)
    .sign(key.key);
}

/**
 * The digest a request-bound token carries: sha256 (hex) of the RFC 8785 canonical JSON of the
 * message's protobuf JSON form. The caller hashes the message it sends; the tool hashes the message
 * it decoded; any other amount, entity or key gives another digest.
 */
export function requestDigest<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return createHash("sha256")
    .update(canonicalize(toJson(schema, message)) ?? "")
    .digest("hex");
}

/** A jose failure as what may be told to the caller. */
export function credentialsErrorOf(error: unknown, audience: string): CredentialsError {
  if (error instanceof CredentialsError) return error;
  if (error instanceof joseErrors.JWTExpired) return new CredentialsError("the bearer token expired", { cause: error });
  if (error instanceof joseErrors.JWTClaimValidationFailed && error.claim === "aud")
    return new CredentialsError(`the bearer token was issued for another service than ${audience}`, { cause: error });
  if (error instanceof joseErrors.JWTClaimValidationFailed)
    return new CredentialsError(`the bearer token's "${error.claim}" claim is not acceptable`, { cause: error });
  if (error instanceof joseErrors.JWSSignatureVerificationFailed)
    return new CredentialsError("the bearer token's signature does not verify with its key", { cause: error });
  return new CredentialsError("the bearer token is malformed or not signed by a trusted key", { cause: error });
}
