// What each process of the local suite is given: the data folder and the public keys for all,
// the orchestrator's private key and call secrets for the orchestrator alone, each tool's own call
// key to that tool alone, and each service's own declared secret files (risk's customer-key pepper)
// to that service alone (all made on first start); and to all, where each service of the suite listens, so an
// address left in the shell (KB_SEARCH_ADDR, ORCHESTRATOR_ADDR) does not point the suite at another one.
import { ensureLocalKeys, localToolCallKeys, type ServiceSpec } from "@loopguard/tool-sdk";
import { localSecretFiles } from "./local-secrets.js";
import type { SupervisorOptions } from "./supervisor.js";

/** `<PREFIX>_ADDR` of every service: the loopback port the supervisor gives it. */
export function suiteAddresses(specs: readonly ServiceSpec[]): Record<string, string> {
  return Object.fromEntries(specs.map((spec) => [`${spec.envPrefix}_ADDR`, `127.0.0.1:${spec.port}`]));
}

export function suiteEnvironment(
  dataDir: string,
  specs: readonly ServiceSpec[],
): Pick<SupervisorOptions, "env" | "envFor"> {
  const keys = ensureLocalKeys(dataDir);
  return {
    env: { LOOPGUARD_DATA_DIR: dataDir, LOOPGUARD_JWKS_FILE: keys.jwks, ...suiteAddresses(specs) },
    // Only the orchestrator signs and holds the call secrets; a tool holds its own call key, which
    // checks credentials made for it and for no other service.
    envFor: (spec: ServiceSpec): Record<string, string> => ({
      ...localSecretFiles(spec, dataDir),
      ...(spec.kind === "orchestrator"
        ? { LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator, LOOPGUARD_CALL_SECRETS_FILE: keys.callSecrets }
        : { [`${spec.envPrefix}_CALL_KEYS_FILE`]: localToolCallKeys(keys, spec.name) }),
    }),
  };
}
