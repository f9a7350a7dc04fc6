// Credentials for the orchestrator's tool calls that cost microseconds: a standard JWT (compact JWS,
// HS256) whose MAC key belongs to one tool. The orchestrator holds the call secrets; a tool's key is
// HKDF-SHA256(secret, the tool's name), so each tool is given its own key and nothing else — it can
// check credentials made for it, and can neither make nor check one for any other service. The
// claims are the signed tokens' (session subject, audience, the method and its scope, expiry, `req`
// for an irreversible call), so every rule the tools apply stays as it was.
// Minted and checked by hand over node:crypto: jose signs and verifies HS256 through WebCrypto's
// async API, ~80–90 µs a token here against ~5 µs for createHmac (`pnpm bench auth`).
import { createHmac, hkdfSync, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { JWK } from "jose";
import { type Caller, CredentialsError, echoedKid, KeyError, type MintOptions, TOKEN_ISSUER } from "./auth.js";

export const CALL_KEY_ALGORITHM = "HS256";
/** Bytes of a call secret and of a tool's derived key. */
const KEY_BYTES = 32;
/** HKDF salt: versions the derivation, so a later scheme never yields the same keys. */
const DERIVATION = "loopguard call key v1";

/** A symmetric key with its id: a call secret (the orchestrator's) or one tool's derived key. */
export interface CallKey {
  readonly kid: string;
  readonly secret: Buffer;
}

/** A set of call keys as JWKs (kty "oct"); a tool's set names the tool each key is for. */
export interface CallKeySet {
  readonly keys: readonly JWK[];
}

/** A new call secret: the orchestrator's, from which each tool's key is derived. */
export function newCallSecret(kid: string): JWK {
  return { kty: "oct", kid, k: randomBytes(KEY_BYTES).toString("base64url"), alg: CALL_KEY_ALGORITHM, use: "sig" };
}

/** The keys of a set, first (the one the orchestrator mints with) first; `audience`: the tool each must be for. */
export function readCallKeys(value: unknown, audience?: string): CallKey[] {
  const keys = (value as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0)
    throw new KeyError('a call key set is {"keys": [ … ]} with one key or more');
  const seen = new Set<string>();
  return keys.map((jwk: Record<string, unknown>) => {
    if (jwk?.kty !== "oct" || typeof jwk.k !== "string" || typeof jwk.kid !== "string" || jwk.kid === "")
      throw new KeyError("each call key is a symmetric JWK with a kid (kty oct, k, kid)");
    if (seen.has(jwk.kid)) throw new KeyError(`call key ${jwk.kid} is listed twice`);
    seen.add(jwk.kid);
    if (audience !== undefined && jwk.loopguard_audience !== audience)
      throw new KeyError(`call key ${jwk.kid} is for ${String(jwk.loopguard_audience)}, not ${audience}`);
    const secret = Buffer.from(jwk.k, "base64url");
    if (secret.length < KEY_BYTES)
      throw new KeyError(`call key ${jwk.kid} has ${secret.length} bytes; at least ${KEY_BYTES}`);
    return { kid: jwk.kid, secret };
  });
}

function derive(secret: Buffer, audience: string): Buffer {
  return Buffer.from(hkdfSync("sha256", secret, DERIVATION, audience, KEY_BYTES));
}

/** The key set one tool is given: its key under each secret, same kids, same order. */
export function toolCallKeys(secrets: readonly CallKey[], audience: string): CallKeySet {
  return {
    keys: secrets.map((s) => ({
      kty: "oct",
      kid: s.kid,
      k: derive(s.secret, audience).toString("base64url"),
      alg: CALL_KEY_ALGORITHM,
      use: "sig",
      loopguard_audience: audience,
    })),
  };
}

function headerOf(kid: string): string {
  return Buffer.from(JSON.stringify({ alg: CALL_KEY_ALGORITHM, kid, typ: "JWT" })).toString("base64url");
}

function mac(key: Buffer, input: string): Buffer {
  return createHmac("sha256", key).update(input).digest();
}

/** The orchestrator's side: mints with the first secret (or another it holds, named), deriving each tool's key once. */
export class CallCredentials {
  readonly #secrets: ReadonlyMap<string, { readonly secret: Buffer; readonly header: string }>;
  readonly #keys = new Map<string, Buffer>();
  /** The key ids held, the one minted with by default first. */
  readonly kids: readonly string[];

  constructor(secrets: readonly CallKey[]) {
    this.#secrets = new Map(secrets.map((s) => [s.kid, { secret: s.secret, header: headerOf(s.kid) }]));
    this.kids = secrets.map((s) => s.kid);
  }

  get kid(): string {
    return this.kids[0]!;
  }

  /** A credential under secret `kid` (default the first; it must be one held). */
  mint(options: MintOptions & { readonly expiresAt: number }, kid = this.kid): string {
    const held = this.#secrets.get(kid);
    if (!held) throw new Error(`no call secret ${kid} is held`);
    const derived = `${kid}\n${options.audience}`;
    let key = this.#keys.get(derived);
    if (!key) {
      key = derive(held.secret, options.audience);
      this.#keys.set(derived, key);
    }
    const claims = {
      iss: TOKEN_ISSUER,
      sub: options.subject,
      aud: options.audience,
      scope: options.scopes.join(" "),
      iat: Math.floor(Date.now() / 1000),
      exp: Math.ceil(options.expiresAt / 1000),
      jti: randomUUID(),
      ...(options.requestDigest ? { req: options.requestDigest } : {}),
      ...(options.method ? { mth: options.method } : {}),
    };
    const input = `${held.header}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}`;
    return `${input}.${mac(key, input).toString("base64url")}`;
  }
}

interface Claims {
  readonly iss?: unknown;
  readonly sub?: unknown;
  readonly aud?: unknown;
  readonly scope?: unknown;
  readonly exp?: unknown;
  readonly req?: unknown;
  readonly mth?: unknown;
}

/** What a call credential checked to: the caller and when it stops being valid (epoch ms). */
export interface CheckedCall {
  readonly caller: Caller;
  readonly expiresAt: number;
}

/** The tool's side: checks credentials made with its own keys. */
export class CallKeyChecker {
  readonly kids: readonly string[];
  readonly #audience: string;
  /** Where the tool's keys come from, for a refusal to name: e.g. BILLING_CALL_KEYS_FILE. */
  readonly #source: string;
  /** Keyed by the exact header segment each kid's credentials carry: any other header is not one of ours. */
  readonly #byHeader: ReadonlyMap<string, CallKey>;

  constructor(keys: readonly CallKey[], audience: string, source: string) {
    this.kids = keys.map((k) => k.kid);
    this.#audience = audience;
    this.#source = source;
    this.#byHeader = new Map(keys.map((k) => [headerOf(k.kid), k]));
  }

  /**
   * The caller a call credential stands for; undefined when `token` is not a call credential (a
   * signed token, checked elsewhere). Throws CredentialsError when it is one and does not hold.
   */
  check(token: string, now: number): CheckedCall | undefined {
    const dot = token.indexOf(".");
    const key = this.#byHeader.get(token.slice(0, dot));
    if (!key) return unknownCallKey(token.slice(0, dot), `${this.#audience} (${this.#source})`, this.kids);
    const last = token.lastIndexOf(".");
    // Compared as written: base64url decoding skips characters outside its alphabet, so decoded
    // bytes would let one credential be written many ways.
    const given = Buffer.from(token.slice(last + 1));
    const expected = Buffer.from(mac(key.secret, token.slice(0, last)).toString("base64url"));
    if (last === dot || given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new CredentialsError(
        `the bearer token's signature does not verify with ${this.#audience}'s call key ${key.kid}: it was made for another service, or altered`,
      );
    let claims: Claims;
    try {
      claims = JSON.parse(Buffer.from(token.slice(dot + 1, last), "base64url").toString("utf8")) as Claims;
    } catch {
      throw new CredentialsError("the bearer token is malformed or not signed by a trusted key");
    }
    const { iss, sub, aud, scope, exp, req, mth } = claims;
    if (aud !== this.#audience)
      throw new CredentialsError(`the bearer token was issued for another service than ${this.#audience}`);
    if (typeof exp !== "number" || exp * 1000 <= now) throw new CredentialsError("the bearer token expired");
    if (iss !== TOKEN_ISSUER || typeof sub !== "string" || !sub.startsWith("session:") || typeof scope !== "string")
      throw new CredentialsError("a call credential names a session, its issuer and its scope; this one does not");
    const caller: Caller = {
      subject: sub,
      scopes: new Set(scope.split(" ").filter(Boolean)),
      role: "orchestrator",
      keyId: key.kid,
      ...(typeof req === "string" ? { requestDigest: req } : {}),
      ...(typeof mth === "string" ? { method: mth } : {}),
    };
    return { caller, expiresAt: exp * 1000 };
  }
}

/** A header that claims HS256 under a kid this tool was not given is refused by name; any other is not ours. */
function unknownCallKey(header: string, holder: string, held: readonly string[]): undefined {
  let parsed: { alg?: unknown; kid?: unknown } | undefined;
  try {
    parsed = JSON.parse(Buffer.from(header, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  if (parsed?.alg !== CALL_KEY_ALGORITHM) return undefined;
  if (typeof parsed.kid === "string" && held.includes(parsed.kid))
    throw new CredentialsError(
      `the bearer token names call key ${echoedKid(parsed.kid)}, but its header is not the one ${holder} makes with it: written again by hand?`,
    );
  const kid = echoedKid(parsed.kid);
  throw new CredentialsError(`the bearer token's call key ${kid} is not one held by ${holder}: unknown or removed`, {
    unknownCallKey: typeof parsed.kid === "string" && kid === parsed.kid ? kid : undefined,
  });
}
