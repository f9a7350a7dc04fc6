// Credentials a person pastes into free text (a goal, a note, an error echoing a header): JWTs,
// "Bearer …" and "Basic …" values, URL passwords and API keys with a well-known prefix. redactText
// masks them with the personal data. Hand-written: the maintained scanner on npm (secretlint) is an
// asynchronous linter of whole files driven by a rule configuration, and this runs synchronously on
// every string of every step record, where a few µs is the budget (docs/performance.md, "Redaction").

/**
 * A key with its issuer's prefix, standing at the start of a token: OpenAI and Anthropic `sk-…`,
 * Stripe `sk_live_…` / `rk_test_…`, GitHub `ghp_…` (and gho_, ghu_, ghs_, ghr_, github_pat_),
 * Slack `xoxb-…` / `xoxp-…`, AWS access key ids `AKIA…` / `ASIA…`, Google `AIza…`, GitLab `glpat-…`.
 */
const PREFIXED_KEY =
  "(?:sk-[\\w-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\\w{20,}" +
  "|xox[abprs]-[A-Za-z0-9-]{10,}|A[KS]IA[0-9A-Z]{16}|AIza[\\w-]{35}|glpat-[\\w-]{20,})";
/**
 * A JWT or JWS: base64url JSON header ("{"" is "eyJ"), payload, and a signature (empty when
 * unsigned). It may follow an underscore (`access_token_eyJ…`) or a percent-encoding
 * (`Bearer%20eyJ…`), never another letter or digit.
 */
const JWT = "(?<!(?<!%[0-9A-Fa-f])[A-Za-z0-9])eyJ[\\w-]+\\.[\\w-]+\\.[\\w-]*";
/** The scheme's word in any case ("bearer", "BeArEr"), then spaces or a percent-encoded space. */
const scheme = (word: string) => `(\\b${[...word].map((c) => `[${c.toUpperCase()}${c}]`).join("")}(?:\\s+|%20))`;
/** RFC 6750's b64token after "Bearer ": the word stays, the token goes. */
const BEARER = `${scheme("bearer")}([\\w.~+/-]+=*)`;
/** RFC 7617's base64 of "user:password" after "Basic ": the word stays, the credentials go. */
const BASIC = `${scheme("basic")}([A-Za-z0-9+/]+=*)`;
/** The password of a URL's user information (`postgres://app:secret@db/x`): the rest of the URL stays. */
const URL_PASSWORD = "(\\b[A-Za-z][\\w+.-]*://[^\\s/:@]+:)([^\\s/@]+)(?=@)";
const SECRET = new RegExp(
  `(?<![\\w-])${PREFIXED_KEY}(?![\\w-])|${JWT}(?![\\w-])|${BEARER}|${BASIC}|${URL_PASSWORD}`,
  "g",
);

/**
 * The cheap test every text passes first: each shape above holds one of these, and the shortest
 * ("Basic " and the 4 characters of "a:b") is 10 characters long. A step record's strings hold none.
 */
const MAY_HOLD_SECRET =
  /eyJ|[Ee][Aa][Rr][Ee][Rr]|[Aa][Ss][Ii][Cc]|:\/\/|sk-|k_live_|k_test_|gh[pousr]_|github_pat_|xox[abprs]-|A[KS]IA|AIza|glpat-/;
const SHORTEST_SECRET = 10;

/**
 * A word after "Bearer" is a token when it could not be prose: 8 characters or more, holding a
 * digit or a symbol, or 20 letters or more ("Bearer tokens", "Bearer authentication" stay).
 */
const isBearerToken = (word: string) => word.length >= 20 || (word.length >= 8 && /[^A-Za-z]/.test(word));

/** No control character, and no U+FFFD: what bytes that are not UTF-8 decode to. */
const PRINTABLE = /^[^\p{Cc}\ufffd]*$/u;

/**
 * A word after "Basic" is credentials when it decodes to "user:password" in printable characters
 * ("Basic authentication", "basic information" decode to neither), or holds a digit or a symbol
 * in 8 characters or more. Not 20 letters alone, as after "Bearer": "basic" is a word of prose.
 */
function isBasicCredentials(word: string): boolean {
  if (word.length >= 8 && /[^A-Za-z]/.test(word)) return true;
  if (word.length % 4 === 1) return false;
  const decoded = Buffer.from(word, "base64").toString("utf8");
  return decoded.includes(":") && PRINTABLE.test(decoded);
}

/** `text` with every JWT, bearer token, Basic credentials, URL password and prefixed API key in it replaced by `replacement`. */
export function replaceSecrets(text: string, replacement: string): string {
  if (text.length < SHORTEST_SECRET || !MAY_HOLD_SECRET.test(text)) return text;
  return text.replace(
    SECRET,
    (
      found,
      bearer: string | undefined,
      token: string | undefined,
      basic: string | undefined,
      basicWord: string | undefined,
      userinfo: string | undefined,
    ) => {
      if (bearer !== undefined) return isBearerToken(token!) ? bearer + replacement : found;
      if (basic !== undefined) return isBasicCredentials(basicWord!) ? basic + replacement : found;
      if (userinfo !== undefined) return userinfo + replacement;
      return replacement;
    },
  );
}
