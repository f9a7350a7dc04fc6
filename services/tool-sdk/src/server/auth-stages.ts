// The stages that decide who may call: the bearer token and its scope (for as long as a stream
// lasts), and for an irreversible method a credential bound to the exact request (see stages.ts for
// the others, serve.ts for the order).
import type { DescMethod } from "@bufbuild/protobuf";
import {
  BREAK_GLASS_MAX_TTL_SECONDS,
  breakGlassReasonProblem,
  type Caller,
  CredentialsError,
  requestDigest,
  TOKEN_CLOCK_SKEW_MS,
  UNKNOWN_CALL_KEY,
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

function refusal(cause: unknown, tool: string): ToolError {
  const why =
    cause instanceof CredentialsError
      ? cause.message
      : `the bearer token does not verify (expired, malformed, not signed by a trusted key, or issued for another service than ${tool})`;
  const unknownCallKey = cause instanceof CredentialsError ? cause.unknownCallKey : undefined;
  return new ToolError(status.UNAUTHENTICATED, "CREDENTIALS_INVALID", why, {
    cause,
    ...(unknownCallKey ? { metadata: { [UNKNOWN_CALL_KEY]: unknownCallKey } } : {}),
  });
}

/** The caller a request's authorization value names, and its token, when it verifies for `tool`; else its refusal, thrown. */
async function verifiedCaller(
  verifier: TokenVerifier,
  tool: string,
  authorization: unknown,
  where: "header" | "metadata",
): Promise<{ readonly caller: Caller; readonly token: string }> {
  const token = bearerToken(authorization);
  if (!token)
    throw new ToolError(
      status.UNAUTHENTICATED,
      "CREDENTIALS_INVALID",
      `missing bearer token in the authorization ${where}`,
    );
  try {
    return { caller: await verifier.verify(token), token };
  } catch (cause) {
    throw refusal(cause, tool);
  }
}

/**
 * How often open streams' tokens are verified again: twice per look the verifier takes at its key
 * files (at most once a second, on verify), so a revoked key ends a stream within about 1.5 s.
 */
const STREAM_RECHECK_MS = 500;

/** A server stream in progress, under the token it opened with. */
interface OpenStream {
  readonly verifier: TokenVerifier;
  readonly token: string;
  readonly tool: string;
  readonly abort: AbortController;
}

// One sweep per process over all open streams rather than a timer each: with 10,000 streams a
// sweep is 10,000 lookups in the verifiers' caches; a signature is checked again only once a token
// left the cache (it expired, or the keys changed).
const openStreams = new Set<OpenStream>();
let sweepTimer: NodeJS.Timeout | undefined;
let sweeping = false;

/** Verifies a stream's token again; one no longer good ends the stream UNAUTHENTICATED (its signal's reason). */
async function recheck(stream: OpenStream): Promise<void> {
  if (stream.abort.signal.aborted) return;
  try {
    await stream.verifier.verify(stream.token);
  } catch (cause) {
    stream.abort.abort(refusal(cause, stream.tool));
  }
}

async function sweepOpenStreams(): Promise<void> {
  if (sweeping) return;
  sweeping = true;
  try {
    // One at a time: after a key change the first stream of a token re-fills the cache for the others.
    for (const stream of openStreams) await recheck(stream);
  } finally {
    sweeping = false;
  }
}

function follow(stream: OpenStream): void {
  openStreams.add(stream);
  sweepTimer ??= setInterval(() => void sweepOpenStreams(), STREAM_RECHECK_MS).unref();
}

function unfollow(stream: OpenStream): void {
  openStreams.delete(stream);
  if (openStreams.size === 0 && sweepTimer) {
    clearInterval(sweepTimer);
    sweepTimer = undefined;
  }
}

/**
 * Whether an HTTP request's authorization header holds a bearer token that verifies for this tool:
 * checked before the body is read or decoded (connect.ts), so a caller without one costs a header's
 * look. The method's chain checks the rest (its scope, its method, a binding) and verifies again,
 * from the verifier's cache.
 */
export function bearerCheck(
  verifier: TokenVerifier,
  tool: string,
): (authorization: string | null) => Promise<ToolError | undefined> {
  return (authorization) =>
    verifiedCaller(verifier, tool, authorization, "header").then(
      () => undefined,
      (refused: ToolError) => refused,
    );
}

/**
 * The bearer token must verify (audience: this tool), be for this method when it names one (claim
 * `mth`) and carry the method's required scope; a probe's token (synthetic checks) reaches
 * read-only methods only, whatever scopes it carries. A server stream's token must keep verifying:
 * it is checked again before each message and every STREAM_RECHECK_MS while the stream waits, so
 * an expired token or a revoked key ends the stream UNAUTHENTICATED.
 */
export function authStage(
  verifier: TokenVerifier,
  tool: string,
  method: DescMethod,
  requiredScope: string,
): Interceptor {
  const readOnly = methodPolicy(method).effect === Effect.READ_ONLY;
  const path = methodPath(method);
  const streaming = method.methodKind === "server_streaming";
  return (next) => async (call) => {
    const { caller, token } = await verifiedCaller(verifier, tool, call.metadata.get("authorization")[0], "metadata");
    call.caller = caller;
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
    if (!streaming) return await next(call);
    // A stream may outlive its token or its key (a session can wait hours for an approval).
    const stream: OpenStream = { verifier, token, tool, abort: call.abort };
    const send = call.send;
    call.send = async (message) => {
      await recheck(stream);
      if (call.abort.signal.aborted) throw call.abort.signal.reason;
      return send(message);
    };
    follow(stream);
    try {
      return await next(call);
    } finally {
      unfollow(stream);
    }
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
  const reasonProblem = breakGlassReasonProblem(caller.breakGlassReason ?? "");
  if (reasonProblem) return reasonProblem;
  const { issuedAt, expiresAt } = caller;
  // A future iat would let exp − iat pass while the token lives far longer than it says.
  if (issuedAt === undefined || expiresAt === undefined || issuedAt > now + TOKEN_CLOCK_SKEW_MS)
    return "a break-glass token must say when it was issued (iat), and not later than now";
  if (expiresAt - issuedAt > BREAK_GLASS_MAX_TTL_SECONDS * 1000)
    return `a break-glass token lives at most ${BREAK_GLASS_MAX_TTL_SECONDS} s; this one ${Math.round((expiresAt - issuedAt) / 1000)} s`;
  return undefined;
}
