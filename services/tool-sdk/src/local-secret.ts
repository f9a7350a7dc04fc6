// Local secrets made once under the data folder by `pnpm start` for the services that declare
// them (risk's customer-key pepper); clusters mount Kubernetes secrets instead. The folder is
// 0700 and the file 0600 when created here.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/** The secret in `file`, made first (64 hex characters from 32 random bytes) if there is none. */
export function ensureSecretFile(file: string): string {
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, randomBytes(32).toString("hex"), { mode: 0o600, flag: "wx" });
  }
  return readFileSync(file, "utf8").trim();
}
