// What each process of the local suite is given: the data folder and the public keys for all,
// the orchestrator's private key for the orchestrator alone, and each service's own declared
// secret files (risk's customer-key pepper) to that service alone (all made on first start).
import { ensureLocalKeys, type ServiceSpec } from "@loopguard/tool-sdk";
import { localSecretFiles } from "./local-secrets.js";
import type { SupervisorOptions } from "./supervisor.js";

export function suiteEnvironment(dataDir: string): Pick<SupervisorOptions, "env" | "envFor"> {
  const keys = ensureLocalKeys(dataDir);
  return {
    env: { LOOPGUARD_DATA_DIR: dataDir, LOOPGUARD_JWKS_FILE: keys.jwks },
    // Only the orchestrator signs (tool calls); tools verify with public keys and never see a private one.
    envFor: (spec: ServiceSpec): Record<string, string> => ({
      ...localSecretFiles(spec, dataDir),
      ...(spec.kind === "orchestrator" ? { LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator } : {}),
    }),
  };
}
