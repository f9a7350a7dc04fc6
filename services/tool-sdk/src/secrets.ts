// Credentials a person pastes into free text (a goal, a note, an error echoing a header): JWTs,
// "Bearer …" values and API keys with a well-known prefix. redactText masks them with the personal
// data. Hand-written: the maintained scanner on npm (secretlint) is an asynchronous linter of whole
// files driven by a rule configuration, and this runs synchronously on every string of every step
// record, where a few µs is the budget (docs/performance.md, "Redaction").

/**
 * A key with its issuer's prefix, standing at the start of a token: OpenAI and Anthropic `sk-…`,
 * Stripe `sk_live_…` / `rk_test_…`, GitHub `ghp_…` (and gho_, ghu_, ghs_, ghr_, github_pat_),
 * Slack `xoxb-…` / `xoxp-…`, AWS access key ids `AKIA…` / `ASIA…`, Google `AIza…`, GitLab `glpat-…`.
 */
const PREFIXED_KEY =
  "(?:sk-[\\w-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\\w{20,}" +
  "|xox[abprs]-[A-Za-z0-9-]{10,}|A[KS]IA[0-9A-Z]{16}|AIza[\\w-]{35}|glpat-[\\w-]{20,})";
/** A JWT or JWS: base64url JSON header ("{"" is "eyJ"), payload, and a signature (empty when unsigned). */
const JWT = "eyJ[\\w-]+\\.[\\w-]+\\.[\\w-]*";
/** RFC 6750's b64token after "Bearer ": the word stays, the token goes. */
const BEARER = "(\\b[Bb]earer\\s+|\\bBEARER\\s+)([\\w.~+/-]+=*)";
const SECRET = new RegExp(`(?<![\\w-])(?:${PREFIXED_KEY}|${JWT})(?![\\w-])|${BEARER}`, "g");

/**
 * The cheap test every text passes first: each shape above holds one of these, and the shortest
 * ("Bearer " and 8 characters) is 15 characters long. A step record's strings hold none.
 */
const MAY_HOLD_SECRET = /eyJ|earer|EARER|sk-|k_live_|k_test_|gh[pousr]_|github_pat_|xox[abprs]-|A[KS]IA|AIza|glpat-/;
const SHORTEST_SECRET = 15;

/**
 * A word after "Bearer" is a token when it could not be prose: 8 characters or more, holding a
 * digit or a symbol, or 20 letters or more ("Bearer tokens", "Bearer authentication" stay).
 */
const isBearerToken = (word: string) => word.length >= 20 || (word.length >= 8 && /[^A-Za-z]/.test(word));

/** `text` with every JWT, bearer token and prefixed API key in it replaced by `replacement`. */
export function replaceSecrets(text: string, replacement: string): string {
  if (text.length < SHORTEST_SECRET || !MAY_HOLD_SECRET.test(text)) return text;
  return text.replace(SECRET, (found, bearer: string | undefined, token: string | undefined) => {
    if (bearer === undefined) return replacement;
    return isBearerToken(token!) ? bearer + replacement : found;
  });
}
