// One way to name a store in configuration, whichever database it is: `sqlite:/abs/path.db`,
// `sqlite:relative.db`, `sqlite::memory:` (one process) or `postgres://user@host:5432/db`
// (several replicas). Errors name the variable and never echo a password.
import { postgresTlsProblem } from "./postgres-tls.js";

export type StoreLocation =
  | { readonly kind: "sqlite"; readonly file: string }
  | { readonly kind: "postgres"; readonly url: string };

/** A store URL that cannot be used; the message names the variable it came from. */
export class StoreUrlError extends Error {
  override readonly name = "StoreUrlError";
}

/**
 * A parameter or key=value pair that carries a secret: `password` and `sslpassword` (which
 * node-postgres reads from the query), and any other name holding "pass", "secret" or "token".
 */
const SECRET_VALUE = /([A-Za-z_]*(?:pass|secret|token)[A-Za-z_]*\s*=\s*)(?:'[^']*'|[^&#\s]*)/gi;

/**
 * The URL with its user info and secret parameters replaced, fit for logs and error messages. The
 * user info ends at the last "@" (a password may hold one, which URL parsers accept), and a string
 * without a scheme is masked up to it too.
 */
export function redactStoreUrl(url: string): string {
  const at = url.lastIndexOf("@");
  const scheme = url.indexOf("://");
  const masked = at < 0 ? url : `${scheme >= 0 && scheme < at ? url.slice(0, scheme + 3) : ""}***${url.slice(at)}`;
  return masked.replace(SECRET_VALUE, "$1***");
}

/** The location as it may be logged: the file, or the URL without credentials. */
export function describeStoreLocation(location: StoreLocation): string {
  return location.kind === "sqlite" ? `sqlite:${location.file}` : redactStoreUrl(location.url);
}

/**
 * Where `url` (the value of the environment variable `variable`) points. A bad URL throws
 * `errorType` (StoreUrlError unless a service passes its own configuration error).
 */
export function parseStoreUrl(
  url: string,
  variable: string,
  errorType: new (message: string) => Error = StoreUrlError,
): StoreLocation {
  if (url.startsWith("sqlite:")) {
    // `sqlite:///abs/path.db` is accepted as the URL spelling of `sqlite:/abs/path.db`.
    const file = url.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
    if (file === "")
      throw new errorType(
        `${variable} names no SQLite file (want sqlite:/path/to/file.db or sqlite::memory:), got "${url}"`,
      );
    return { kind: "sqlite", file };
  }
  if (url.startsWith("postgres://") || url.startsWith("postgresql://")) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new errorType(`${variable} is not a valid PostgreSQL URL: "${redactStoreUrl(url)}"`);
    }
    if (parsed.hostname === "" && !parsed.searchParams.has("host")) {
      throw new errorType(`${variable} names no PostgreSQL host: "${redactStoreUrl(url)}"`);
    }
    const tlsProblem = postgresTlsProblem(url);
    if (tlsProblem !== null) throw new errorType(`${variable}: ${tlsProblem}`);
    return { kind: "postgres", url };
  }
  throw new errorType(
    `${variable} must be sqlite:<file> or postgres://user@host:port/database, got "${redactStoreUrl(url)}"`,
  );
}
