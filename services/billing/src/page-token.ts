// ListRefunds' page tokens. A token is opaque to callers (AIP-158) and names the order it pages
// through, so it reads nothing past what the request's order_id may read: a token of another order,
// or one not made here, is INVALID_ARGUMENT. It holds no secret and is safe to log.
import { status, ToolError } from "@loopguard/tool-sdk";

const VERSION = "1";
const SHAPE = new RegExp(`^${VERSION}\\.(ord_[A-Za-z0-9]{12})\\.([1-9][0-9]{0,15})$`);

export function pageToken(orderId: string, after: number): string {
  return Buffer.from(`${VERSION}.${orderId}.${after}`).toString("base64url");
}

/** The `seq` to go on after; undefined for the first page (no token). */
export function pageAfter(token: string, orderId: string): number | undefined {
  if (token === "") return undefined;
  const match = SHAPE.exec(Buffer.from(token, "base64url").toString("latin1"));
  if (!match) throw invalidToken("is not a page token of ListRefunds: pass next_page_token as it came");
  if (match[1] !== orderId) throw invalidToken(`pages through order ${match[1]}, not ${orderId}`);
  const after = Number(match[2]);
  if (!Number.isSafeInteger(after))
    throw invalidToken("is not a page token of ListRefunds: pass next_page_token as it came");
  return after;
}

function invalidToken(description: string): ToolError {
  return new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `page_token: ${description}`, {
    fieldViolations: [{ field: "page_token", description, reason: "page_token.invalid" }],
  });
}
