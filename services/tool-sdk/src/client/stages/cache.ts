// Fallbacks of a read that failed for the tool's reasons (never the caller's mistake): the last good
// answer to the same request within its max age, marked as served from the cache with its age; else
// the method's declared degraded answer (an empty response). The tool's own refusal of the request
// (NOT_FOUND: the entity is gone) forgets its earlier answer, so no later outage serves it again.
import { create } from "@bufbuild/protobuf";
import { CALLER_ERROR_CODES } from "../../errors.js";
import type { CallError } from "../call-error.js";
import type { ClientInterceptor } from "../chain.js";
import { ResponseCache } from "../response-cache.js";

export interface Fallback {
  /** Good answers are kept and served (the contract's CACHE degradation, not freshness-critical). */
  readonly cacheable: boolean;
  /** Oldest cached answer served. */
  readonly maxAgeMs: number;
  /** The contract's CACHE_THEN_EMPTY: an empty response when nothing cached will do. */
  readonly emptyFallback: boolean;
}

export function cacheStage(fallback: Fallback, cache: ResponseCache): ClientInterceptor {
  return (next) => async (call) => {
    const key = fallback.cacheable ? ResponseCache.key(call.target.path, call.bytes) : undefined;
    const sentAt = performance.now();
    try {
      const response = await next(call);
      if (key) cache.set(key, response, sentAt);
      return response;
    } catch (thrown) {
      const error = thrown as CallError;
      if (key && error.refusedByTool) cache.delete(key);
      if (call.options.fallback === false || CALLER_ERROR_CODES.has(error.code)) throw error;
      const cached = key ? cache.get(key) : undefined;
      const ageMs = cached ? Math.round(performance.now() - cached.readAt) : Number.POSITIVE_INFINITY;
      if (cached && ageMs <= fallback.maxAgeMs) {
        Object.assign(call.outcome, {
          source: "cache",
          cacheAgeMs: ageMs,
          cachedAt: Date.now() - ageMs,
          liveError: error,
        });
        return cached.response;
      }
      if (!fallback.emptyFallback || call.options.degraded === false) throw error;
      Object.assign(call.outcome, { source: "degraded", liveError: error });
      return create(call.target.method.output);
    }
  };
}
