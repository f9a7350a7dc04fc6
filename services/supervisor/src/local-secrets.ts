// The secret files a service declares in its manifest ("secretFiles": VARIABLE → "secret/key",
// what a cluster mounts from a Secret), made locally once under <data>/secrets/<secret>/<key>
// (0600, folders 0700) so a fresh clone still starts with one command. The signing key is no
// plain secret: it is a key pair ensureLocalKeys makes.
import { join } from "node:path";
import { ensureSecretFile, type ServiceSpec } from "@loopguard/tool-sdk";

const KEY_PAIR_FILES = new Set(["LOOPGUARD_SIGNING_KEY_FILE", "LOOPGUARD_CALL_SECRETS_FILE"]);

export function localSecretFiles(spec: ServiceSpec, dataDir: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [variable, ref] of Object.entries(spec.secretFiles)) {
    if (KEY_PAIR_FILES.has(variable)) continue;
    const path = join(dataDir, "secrets", ref);
    ensureSecretFile(path);
    env[variable] = path;
  }
  return env;
}
