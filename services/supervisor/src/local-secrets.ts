// Secrets a service declares in its manifest ("loopguard.secrets"), made once under the data
// folder (0600 in a 0700 folder) and named to that service alone: `pnpm start` works on a fresh
// clone, and no service is handed another's secret.
import { join } from "node:path";
import { ensureSecretFile } from "@loopguard/tool-sdk";
import type { ServiceSpec } from "./services.js";

export function withLocalSecrets(spec: ServiceSpec, dataDir: string): ServiceSpec {
  const env: Record<string, string> = { ...spec.env };
  for (const [variable, file] of Object.entries(spec.secrets)) {
    const path = join(dataDir, file);
    ensureSecretFile(path);
    env[variable] = path;
  }
  return { ...spec, env };
}
