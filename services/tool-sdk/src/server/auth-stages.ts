// The stages that decide who may call: the bearer token and its scope, and for an irreversible
// method a credential bound to the exact request (see stages.ts for the others, serve.ts for the order).
import type { DescMethod } from "@bufbuild/protobuf";
import {
  BREAK_GLASS_MAX_REASON_CHARS,
  BREAK_GLASS_MAX_TTL_SECONDS,
  type Caller,
  CredentialsError,
  requestDigest,
  TOKEN_CLOCK_SKEW_MS,
} from "../auth.js";
import { envPrefixOf } from "../config.js";
import { Effect, methodPath, methodPolicy } from "../contract.js";
import { status, ToolError } from "../errors.js";
import type { TokenVerifier } from "../token-verifier.js";
import type { Interceptor } from "./interceptor.js";

function bearerToken(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  return /^Bearer\s+(\S+)$/i.exec(value)?.[1];
}

/**
 * The bearer token must verify (audience: this tool), be for this method when it names one (claim
 * `mth`) and carry the method's required scope; a probe's token (synthetic checks) reaches
 * read-only methods only, whatever scopes it carries.
 */
export function authStage(
  verifier: TokenVerifier,
  tool: string,
  method: DescMethod,
  requiredScope: string,
): Interceptor {
  const readOnly = methodPolicy(method).effect === Effect.READ_ONLY;
  const path = methodPath(method);
  return (next) => async (call) => {
    const token = bearerToken(call.metadata.get("authorization")[0]);
    if (!token)
      throw new ToolError(
        status.UNAUTHENTICATED,
        "CREDENTIALS_INVALID",
        "missing bearer token in the authorization metadata",
      );
    try {
      call.caller = await verifier.verify(token);
    } catch (cause) {
      const why =
        cause instanceof CredentialsError
          ? cause.message
          : `the bearer token does not verify (expired, malformed, not signed by a trusted key, or issued for another service than ${tool})`;
      throw new ToolError(status.UNAUTHENTICATED, "CREDENTIALS_INVALID", why, { cause });
    }
    // Methods share scopes, so the orchestrator's credentials name their method too. One without the
    // claim (a person's or a probe's token) goes by its scope; so does an orchestrator's from before
    // the claim, which a tool released ahead of the orchestrator (`pnpm release <tool>`) still gets.
    const named = call.caller.method;
    if (named !== undefined && named !== path)
      throw new ToolError(
        status.UNAUTHENTICATED,
        "CREDENTIALS_INVALID",
        `the bearer token was issued for ${named}, not ${path}`,
      );
    if (requiredScope && !call.caller.scopes.has(requiredScope)) {
      throw new ToolError(
        status.PERMISSION_DENIED,
        "SCOPE_MISSING",
        `${method.name} requires scope "${requiredScope}"`,
        { metadata: { required_scope: requiredScope } },
      );
    }
    if (call.caller.role === "probe" && !readOnly) {
      throw new ToolError(
        status.PERMISSION_DENIED,
        "SCOPE_MISSING",
        `${method.name} is not read-only: a probe's token (synthetic checks) may call read-only methods only`,
      );
    }
    return await next(call);
  };
}

/**
 * An irreversible method runs only under a credential bound to this exact request: the
 * orchestrator's token whose `req` claim is the digest of the request as decoded here, or — when
 * the service enables break-glass — a break-glass key's token that says why. Any other amount,
 * entity or key under a bound token, and any person's token, is PERMISSION_DENIED.
 */
export function bindingStage(tool: string, method: DescMethod, breakGlass: boolean): Interceptor {
  const deny = (why: string) =>
    new ToolError(
      status.PERMISSION_DENIED,
      "CREDENTIAL_NOT_BOUND",
      `${method.name} moves something that cannot be taken back: ${why}`,
    );
  const breakGlassNeeds = breakGlass ? "or a break-glass token with a reason" : "(break-glass is off on this service)";
  return (next) => (call) => {
    const caller = call.caller!;
    if (caller.role === "orchestrator") {
      if (caller.requestDigest === undefined)
        return Promise.reject(
          deny(`it needs the orchestrator's token bound to this request (claim "req"); this one is bound to none`),
        );
      if (caller.requestDigest !== requestDigest(method.input, call.request as never)) {
        return Promise.reject(
          deny("the token is bound to another request (its amount, entity or key differ); nothing was done"),
        );
      }
      return next(call);
    }
    if (caller.role === "break-glass") {
      if (!breakGlass)
        return Promise.reject(
          deny(
            `break-glass is off on this service; enable it with ${envPrefixOf(tool)}_BREAK_GLASS=on, or let the orchestrator make the call`,
          ),
        );
      const problem = breakGlassProblem(caller, Date.now());
      return problem ? Promise.reject(deny(problem)) : next(call);
    }
    return Promise.reject(
      deny(
        `it needs the orchestrator's token bound to this exact request ${breakGlassNeeds}; ${caller.subject}'s ${caller.role} token is neither`,
      ),
    );
  };
}

/** Why a break-glass token is not acceptable (as `pnpm mint-token` would mint it), or undefined. */
function breakGlassProblem(caller: Caller, now: number): string | undefined {
  const reason = caller.breakGlassReason ?? "";
  if (!reason.trim()) return 'a break-glass token must say why (mint it with --reason "…")';
  if (reason.length > BREAK_GLASS_MAX_REASON_CHARS)
    return `a break-glass token's reason is at most ${BREAK_GLASS_MAX_REASON_CHARS} characters`;
  const { issuedAt, expiresAt } = caller;
  // A future iat would let exp − iat pass while the token lives far longer than it says.
  if (issuedAt === undefined || expiresAt === undefined || issuedAt > now + TOKEN_CLOCK_SKEW_MS)
    return "a break-glass token must say when it was issued (iat), and not later than now";
  if (expiresAt - issuedAt > BREAK_GLASS_MAX_TTL_SECONDS * 1000)
    return `a break-glass token lives at most ${BREAK_GLASS_MAX_TTL_SECONDS} s; this one ${Math.round((expiresAt - issuedAt) / 1000)} s`;
  return undefined;
}
