// A throwaway certificate authority for TLS tests, made with the openssl CLI (Node's crypto can
// sign nothing X.509; the CLI comes with the PostgreSQL packages CI installs, through ssl-cert):
// a CA, and a server certificate it signs for the names given (DNS names and IP addresses).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestCa {
  /** PEM file of the CA certificate: what a client's sslrootcert names. */
  readonly caFile: string;
  /** A server certificate and key signed by this CA, for `names` (e.g. ["localhost", "127.0.0.1"]). */
  issueServer(names: readonly string[]): { certFile: string; keyFile: string };
  remove(): void;
}

const openssl = (args: string[], cwd: string): void => {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"], timeout: 30_000 });
};

/** A new CA (EC P-256 keys: fast to make) in a fresh temp folder; `name` goes into its subject. */
export function makeTestCa(name = "loopguard test CA"): TestCa {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-ca-"));
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", `/CN=${name}`], dir);
  let issued = 0;
  return {
    caFile: join(dir, "ca.crt"),
    issueServer(names) {
      const base = `server${++issued}`;
      const san = names.map((n) => (isIP(n) ? `IP:${n}` : `DNS:${n}`)).join(",");
      writeFileSync(join(dir, `${base}.ext`), `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);
      openssl(
        ["req", "-new", ...ec, "-keyout", `${base}.key`, "-out", `${base}.csr`, "-subj", `/CN=${names[0] ?? "server"}`],
        dir,
      );
      openssl(
        [
          "x509",
          "-req",
          "-in",
          `${base}.csr`,
          "-CA",
          "ca.crt",
          "-CAkey",
          "ca.key",
          "-CAcreateserial",
          "-days",
          "2",
          "-extfile",
          `${base}.ext`,
          "-out",
          `${base}.crt`,
        ],
        dir,
      );
      return { certFile: join(dir, `${base}.crt`), keyFile: join(dir, `${base}.key`) };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
