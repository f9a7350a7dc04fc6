// The idempotency key of a call's StartSession: the client's own, sent in the tools/call request's
// `_meta`, or a new one. The orchestrator keys sessions by caller and key, so a call sent again with
// the key of one whose answer was lost follows the session that call made instead of starting another.
import { randomUUID } from "node:crypto";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";

/** The `_meta` key a client sends its idempotency key under (MCP's prefix/name form). */
export const IDEMPOTENCY_META_KEY = "loopguard/idempotency-key";

/** The orchestrator's own pattern and length bound for a key, and at least 16 characters, so keys stay apart. */
const SHAPE = /^[A-Za-z0-9_.:-]{16,128}$/;

/**
 * The key of a call: the one in `meta` if the client sent one (refused, naming the field, if it is
 * malformed), else a new one.
 */
export function idempotencyKeyOf(meta: Record<string, unknown> | undefined): string {
  const sent = meta?.[IDEMPOTENCY_META_KEY];
  if (sent === undefined) return `mcp-${randomUUID()}`;
  if (typeof sent !== "string" || !SHAPE.test(sent))
    throw new McpError(
      ErrorCode.InvalidParams,
      `_meta.${IDEMPOTENCY_META_KEY} must be 16 to 128 characters of letters, digits and _ . : -`,
    );
  return sent;
}
