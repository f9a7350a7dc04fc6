// TLS to PostgreSQL as the store URLs spell it: `?sslmode=verify-full&sslrootcert=/path/ca.crt`.
// node-postgres reads sslrootcert itself (pg-connection-string opens the file whenever it parses
// the URL, on every new connection), and with the pinned version every sslmode but `disable` and
// `no-verify` verifies the server's certificate and its name against the CAs it has: Node's
// built-in ones unless sslrootcert names a file. So `require` does not mean what libpq's does, and
// a database with a private CA (CloudNativePG, RDS, Cloud SQL) fails without sslrootcert. This
// module makes the two mistakes an operator makes (the CA file missing, the certificate not
// verifying) into errors that say which, naming the host and the file, never the password.

import { accessSync, constants } from "node:fs";

/** The database's TLS setup does not work: the CA file cannot be read or the server's certificate does not verify. */
export class PostgresTlsError extends Error {
  override readonly name = "PostgresTlsError";
}

/** sslmode values whose meaning libpq and node-postgres do not agree on: a URL must say verify-full (or disable). */
const AMBIGUOUS_SSLMODES = new Set(["prefer", "require", "verify-ca"]);

interface TlsParams {
  readonly where: string;
  readonly sslmode: string | null;
  readonly sslrootcert: string | null;
}

function tlsParams(url: string): TlsParams {
  const parsed = new URL(url);
  const host = parsed.searchParams.get("host") ?? parsed.hostname;
  return {
    where: `PostgreSQL at ${host}:${parsed.port || "5432"}`,
    sslmode: parsed.searchParams.get("sslmode"),
    sslrootcert: parsed.searchParams.get("sslrootcert"),
  };
}

/**
 * Why the URL's TLS settings cannot work, checked before connecting: an sslmode whose meaning
 * depends on the client library, or an sslrootcert file that cannot be read. Null when they can.
 */
export function postgresTlsProblem(url: string): string | null {
  const { where, sslmode, sslrootcert } = tlsParams(url);
  if (sslmode !== null && AMBIGUOUS_SSLMODES.has(sslmode)) {
    return `${where}: sslmode=${sslmode} is not supported (node-postgres verifies like verify-full, libpq does not); use sslmode=verify-full&sslrootcert=<CA file>`;
  }
  if (sslrootcert !== null) {
    try {
      accessSync(sslrootcert, constants.R_OK);
    } catch (error) {
      return `${where}: cannot read the CA file sslrootcert=${sslrootcert} (${(error as NodeJS.ErrnoException).code ?? "error"}); mount the database's CA there`;
    }
  }
  return null;
}

/** Node's codes for a certificate chain that does not lead to a trusted CA or is not valid now. */
const UNTRUSTED_CERTIFICATE = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
]);

/**
 * `error` (from connecting to `url`) as a PostgresTlsError when TLS is why it failed, with what to
 * fix; any other error as it is.
 */
export function explainPostgresTlsError(error: unknown, url: string): unknown {
  if (!(error instanceof Error)) return error;
  const code = (error as { code?: unknown }).code;
  const { where, sslrootcert } = tlsParams(url);
  const trusted =
    sslrootcert === null
      ? "the CAs Node.js trusts (no sslrootcert in the URL)"
      : `the CA in sslrootcert=${sslrootcert}`;
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return new PostgresTlsError(
      `${where}: the server's certificate does not name this host (sslmode=verify-full): ${error.message}; connect by a name the certificate lists`,
      { cause: error },
    );
  }
  if (typeof code === "string" && UNTRUSTED_CERTIFICATE.has(code)) {
    return new PostgresTlsError(
      `${where}: the server's certificate does not verify against ${trusted}: ${error.message} (${code})`,
      { cause: error },
    );
  }
  if (/server does not support SSL/i.test(error.message)) {
    return new PostgresTlsError(`${where}: the URL asks for TLS but the server does not offer it`, { cause: error });
  }
  return error;
}
