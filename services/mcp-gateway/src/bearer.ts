// What the HTTP gateway can tell of a bearer without keys (it holds none; the orchestrator verifies
// signatures): every token the orchestrator accepts, its own or an OIDC provider's, is a compact JWS
// with an expiry. A bearer of another shape, or past its expiry, is refused before its body is read.
import { TOKEN_CLOCK_SKEW_MS } from "@loopguard/tool-sdk";

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]+$/;

/** Whether `token` is a compact JWS whose `exp` has not passed (by the skew the verifiers allow). */
export function currentJws(token: string, now = Date.now()): boolean {
  const payload = COMPACT_JWS.exec(token)?.[1];
  if (payload === undefined) return false;
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    return false;
  }
  const exp = (claims as { exp?: unknown } | null)?.exp;
  return typeof exp === "number" && exp * 1000 + TOKEN_CLOCK_SKEW_MS > now;
}
