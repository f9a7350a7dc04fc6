// The local suite's token-signing secret: made once under the data folder by `pnpm start`, read
// by the services it starts and by `pnpm mint-token`. Clusters mount a Kubernetes secret instead.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export function localSecretPath(dataDir: string): string {
  return join(dataDir, "auth-secret");
}

export function ensureLocalSecret(dataDir: string): string {
  const path = localSecretPath(dataDir);
  if (!existsSync(path)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(path, randomBytes(32).toString("hex"), { mode: 0o600, flag: "wx" });
  }
  return readFileSync(path, "utf8").trim();
}
