// People signed in with an OpenID Connect provider: their ID token is their credential at the
// orchestrator's API. The issuer's keys are found by discovery (`/.well-known/openid-configuration`,
// then its jwks_uri, fetched and refreshed by jose); issuer, audience (the client id alone), azp
// and expiry are checked; the subject becomes "oidc:<sub>" and the roles claim gives the scopes.
import {
  createRemoteJWKSet,
  customFetch,
  decodeJwt,
  decodeProtectedHeader,
  errors,
  type FetchImplementation,
  jwtVerify,
  type RemoteJWKSet,
} from "jose";
import { type Caller, CredentialsError, credentialsErrorOf, TOKEN_CLOCK_SKEW_MS } from "./auth.js";
import { echoedName } from "./pii.js";
import { PEOPLE, type PersonRole, personScopes } from "./people.js";
import { ConfigError } from "./settings.js";

export interface OidcSettings {
  /** The provider's issuer URL, exactly as its ID tokens' `iss` says it. */
  readonly issuer: string;
  /** The client id ID tokens must be issued for (`aud`). */
  readonly audience: string;
  /** The claim holding the person's loopguard roles: an array of requester, approver, operator. */
  readonly rolesClaim: string;
}

export const DEFAULT_OIDC_ROLES_CLAIM = "loopguard_roles";
/** Asymmetric algorithms only: a provider's shared secret is not a key loopguard can trust. */
const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"];
const FETCH_TIMEOUT_MS = 5000;
/** The keys are fetched again for a kid they do not hold at most this often (jose's cooldown, set below). */
const REFETCH_COOLDOWN_S = 30;
/**
 * How long a failed discovery or key set fetch is held: meanwhile each token that needs that fetch is
 * refused at once with the failure's own message, and the provider is not asked. Without it, a
 * provider that fails fast (refuses the connection, answers 5xx or no discovery document) is asked
 * again by every token that comes after its last failure, so a stream of tokens hammers a provider
 * that is down and each pays a fetch. The price: a provider that comes back is noticed up to this much
 * later. One second is long against a stream of tokens, short against a person trying again.
 */
const FAILURE_HOLD_MS = 1000;

/** A URL a provider may live at: https, or plain http on loopback (tests, a local provider). */
export function acceptableIssuerUrl(raw: string): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  return (
    url.protocol === "https:" ||
    (url.protocol === "http:" && ["127.0.0.1", "[::1]", "localhost"].includes(url.hostname))
  );
}

/**
 * ORCHESTRATOR_OIDC_ISSUER (https, or http on loopback for tests), its client id and roles claim; undefined when no
 * issuer is set. Read by the orchestrator and by whatever verifies its callers ahead of it (the HTTP MCP gateway).
 */
export function oidcSettingsOf(env: Readonly<Record<string, string | undefined>>): OidcSettings | undefined {
  const issuer = env.ORCHESTRATOR_OIDC_ISSUER ?? "";
  if (issuer === "") {
    if (env.ORCHESTRATOR_OIDC_AUDIENCE)
      throw new ConfigError("ORCHESTRATOR_OIDC_AUDIENCE is set but ORCHESTRATOR_OIDC_ISSUER is not");
    return undefined;
  }
  if (!acceptableIssuerUrl(issuer))
    throw new ConfigError(
      `ORCHESTRATOR_OIDC_ISSUER must be an https URL (or http://127.0.0.1… for a local provider), got "${issuer}"`,
    );
  const audience = env.ORCHESTRATOR_OIDC_AUDIENCE ?? "";
  if (audience === "")
    throw new ConfigError(
      "ORCHESTRATOR_OIDC_AUDIENCE (the client id ID tokens are issued for) is required with ORCHESTRATOR_OIDC_ISSUER",
    );
  const rolesClaim = env.ORCHESTRATOR_OIDC_ROLES_CLAIM || DEFAULT_OIDC_ROLES_CLAIM;
  return { issuer, audience, rolesClaim };
}

export class OidcVerifier {
  readonly #settings: OidcSettings;
  readonly #scopes = personScopes();
  #keys: Promise<RemoteJWKSet> | undefined;
  /** Until when #keys, a discovery that failed, is given to each token rather than tried again (0: none failed). */
  #discoveryHeldUntil = 0;
  /** Until when the key set is not fetched, after a fetch that yielded no keys (see FAILURE_HOLD_MS). */
  #keySetHeldUntil = 0;

  constructor(settings: OidcSettings) {
    this.#settings = settings;
  }

  /** Whether the token says it comes from this provider (not verified: it only picks the verifier). */
  issued(token: string): boolean {
    try {
      return decodeJwt(token).iss === this.#settings.issuer;
    } catch {
      return false;
    }
  }

  async verify(token: string): Promise<{ caller: Caller; expiresAt: number }> {
    const { issuer, audience, rolesClaim } = this.#settings;
    const keys = await this.#keySet();
    let verified: Awaited<ReturnType<typeof jwtVerify>>;
    try {
      verified = await jwtVerify(token, keys, {
        issuer,
        audience,
        algorithms: ALGORITHMS,
        requiredClaims: ["sub", "exp", "iat"],
        // The provider's clock and this one's disagree by a little, as a token minter's may.
        clockTolerance: TOKEN_CLOCK_SKEW_MS / 1000,
      });
    } catch (error) {
      // A fetch that failed is held from when its failure is seen here; a refusal of the hold's own
      // (KeySetHeld) does not make it longer, or a steady stream of tokens would never let it lapse.
      if (isKeySetFailure(error) && !(error instanceof KeySetHeld))
        this.#keySetHeldUntil = Date.now() + FAILURE_HOLD_MS;
      throw this.#refusal(error, token, keys.coolingDown);
    }
    const { payload, protectedHeader } = verified;
    // jose passes an aud list that merely contains ours. OpenID Connect Core 3.1.3.7: a token that
    // also names other audiences, or was issued to another party (azp), was not issued to us.
    const others = [payload.aud].flat().filter((a) => a !== audience);
    if (others.length > 0)
      throw new CredentialsError(
        `the ID token names other audiences than the client id ${audience} (${others.join(", ")})`,
      );
    if (payload.azp !== undefined && payload.azp !== audience)
      throw new CredentialsError(
        `the ID token was issued to another client (azp ${String(payload.azp)}), not the client id ${audience}`,
      );
    const claimed = payload[rolesClaim];
    const roles = (Array.isArray(claimed) ? claimed : []).filter((r): r is PersonRole =>
      PEOPLE.includes(r as PersonRole),
    );
    if (roles.length === 0)
      throw new CredentialsError(
        `the ID token names no loopguard role: its "${rolesClaim}" claim must list some of ${PEOPLE.join(", ")}`,
      );
    const caller: Caller = {
      subject: `oidc:${payload.sub}`,
      scopes: new Set(roles.flatMap((r) => this.#scopes[r])),
      role: "person",
      keyId: `oidc:${protectedHeader.kid ?? ""}`,
    };
    return { caller, expiresAt: (payload.exp ?? 0) * 1000 };
  }

  /**
   * Why an ID token was not taken, saying so when the provider's side failed (its keys could not be
   * fetched, or it no longer publishes the token's key): not the person's token at fault. A key it
   * rotated to after the keys were last fetched is not looked for during jose's cooldown: said so.
   */
  #refusal(error: unknown, token: string, coolingDown: boolean): CredentialsError {
    const { issuer, audience } = this.#settings;
    if (error instanceof errors.JWKSNoMatchingKey) {
      let kid: unknown;
      try {
        kid = decodeProtectedHeader(token).kid;
      } catch {
        kid = undefined;
      }
      const named = typeof kid === "string" ? echoedName(kid) : "(the token names none)";
      const since = coolingDown
        ? `, or by a key it rotated to since; its keys were fetched under ${REFETCH_COOLDOWN_S} s ago and are not fetched again for an unknown key sooner`
        : "";
      return new CredentialsError(
        `the identity provider ${issuer} publishes no key ${named} for the ID token: signed by a key it rotated away, or not by it${since}`,
        { cause: error },
      );
    }
    if (isKeySetFailure(error))
      return new CredentialsError(`the identity provider ${issuer}'s keys could not be fetched to check the ID token`, {
        cause: error,
      });
    return credentialsErrorOf(error, `the client id ${audience}`);
  }

  /**
   * The provider's keys, found once by discovery. A failed discovery is kept, and each token refused
   * with it, for FAILURE_HOLD_MS; the first token after that tries again.
   */
  #keySet(): Promise<RemoteJWKSet> {
    if (this.#discoveryHeldUntil !== 0 && Date.now() >= this.#discoveryHeldUntil) {
      this.#keys = undefined;
      this.#discoveryHeldUntil = 0;
    }
    this.#keys ??= this.#discover().catch((error: unknown) => {
      this.#discoveryHeldUntil = Date.now() + FAILURE_HOLD_MS;
      throw error instanceof CredentialsError
        ? error
        : new CredentialsError(
            error instanceof SyntaxError
              ? `the identity provider ${this.#settings.issuer} answered with no discovery document (not JSON)`
              : `the identity provider ${this.#settings.issuer} could not be reached to check the ID token`,
            { cause: error },
          );
    });
    return this.#keys;
  }

  async #discover(): Promise<RemoteJWKSet> {
    const { issuer } = this.#settings;
    const response = await fetch(`${issuer.replace(/\/$/, "")}/.well-known/openid-configuration`, {
      signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
      redirect: "error",
    });
    if (!response.ok)
      throw new CredentialsError(`the identity provider's discovery document answered HTTP ${response.status}`);
    const document = (await response.json()) as { issuer?: unknown; jwks_uri?: unknown };
    if (document.issuer !== issuer)
      throw new CredentialsError(
        `the identity provider's discovery document names issuer ${JSON.stringify(document.issuer)}, not ${issuer}`,
      );
    if (typeof document.jwks_uri !== "string" || !acceptableIssuerUrl(document.jwks_uri)) {
      throw new CredentialsError(
        "the identity provider's discovery document has no acceptable jwks_uri (https, or http on loopback)",
      );
    }
    return createRemoteJWKSet(new URL(document.jwks_uri), {
      timeoutDuration: FETCH_TIMEOUT_MS,
      cooldownDuration: REFETCH_COOLDOWN_S * 1000,
      // Asked by jose only for a key set it must fetch (none yet, or no key for the token's kid past
      // its cooldown): a token whose key is held never comes here, so it is not refused by the hold.
      // A failed fetch is held without jose knowing: it starts no cooldown, and a key the provider
      // rotated to is fetched by the first token past the hold. Nothing is fetched until the hold has
      // lapsed, so a fetch that succeeds leaves none behind.
      [customFetch]: (url, options) =>
        Date.now() < this.#keySetHeldUntil
          ? Promise.reject(new KeySetHeld(`the key set's last fetch failed under ${FAILURE_HOLD_MS} ms ago`))
          : fetchKeySet(url, options),
    });
  }
}

/** The key set not fetched, its last fetch having failed just before: jose's generic error, as the failure's own. */
class KeySetHeld extends errors.JOSEError {}

/**
 * fetch for jose's key set, a connection that failed (refused, reset, no such host) turned into jose's
 * generic error: jose passes fetch's own TypeError on as it is, and that would read as a malformed token.
 */
const fetchKeySet: FetchImplementation = (url, options) =>
  fetch(url, options).catch((error: unknown) => {
    // Passed on as it is: jose makes it a JWKSTimeout by this name.
    if (error instanceof Error && error.name === "TimeoutError") throw error;
    throw new errors.JOSEError("the key set could not be fetched", { cause: error });
  });

/**
 * A key set fetch that yielded no keys: cut at the timeout, a body that is no key set, or jose's own
 * failure to fetch it (a status other than 200, a body that is no JSON) or the connection's
 * (fetchKeySet), these last its generic error.
 */
function isKeySetFailure(error: unknown): boolean {
  return (
    error instanceof errors.JWKSTimeout ||
    error instanceof errors.JWKSInvalid ||
    (error instanceof errors.JOSEError && error.code === "ERR_JOSE_GENERIC")
  );
}
