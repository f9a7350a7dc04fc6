// The stages that decide who may call: the bearer token and its scope, and for an irreversible
// method a credential bound to the exact request (see stages.ts for the others, serve.ts for the order).
import type { DescMethod } from "@bufbuild/protobuf";
import { CredentialsError, requestDigest } from "../auth.js";
import { envPrefixOf } from "../config.js";
import { Effect, methodPolicy } from "../contract.js";
import { status, ToolError } from "../errors.js";
import type { TokenVerifier } from "../token-verifier.js";
import type { Interceptor } from "./interceptor.js";

function bearerToken(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  return /^Bearer\s+(\S+)$/i.exec(value)?.[1];
}

/**
 * The bearer token must verify (audience: this tool) and carry the method's required scope; a
 * probe's token (synthetic checks) reaches read-only methods only, whatever scopes it carries.
 */
export function authStage(
  verifier: TokenVerifier,
  tool: string,
  method: DescMethod,
  requiredScope: string,
): Interceptor {
  const readOnly = methodPolicy(method).effect === Effect.READ_ONLY;
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
      if (!caller.breakGlassReason?.trim())
        return Promise.reject(deny('a break-glass token must say why (mint it with --reason "…")'));
      return next(call);
    }
    return Promise.reject(
      deny(
        `it needs the orchestrator's token bound to this exact request ${breakGlassNeeds}; ${caller.subject}'s ${caller.role} token is neither`,
      ),
    );
  };
}
