// The bench acts as the local people, with keys made as `pnpm start` makes them (in a throwaway
// data folder): sessions are started by the requester, tools are read by the operator, and the
// processes it starts verify with that folder's JWKS and each tool's own call key (the orchestrator
// holds its signing key and the call secrets).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  audienceOf,
  ensureLocalKeys,
  envPrefixOf,
  type LocalKeys,
  localToolCallKeys,
  methodPolicy,
  mintToken,
  type PersonRole,
  personKey,
  readSigningKey,
  requestDigest,
  servicePolicy,
  servicesOf,
  toolServicesOf,
} from "@loopguard/tool-sdk";
import { contractFiles } from "@loopguard/proto";

export interface BenchPeople {
  /** What every process the bench starts needs to verify the people's and the orchestrator's tokens. */
  readonly env: Readonly<Record<string, string>>;
  /** The orchestrator's environment: the JWKS, its signing key and its call secrets. */
  readonly orchestratorEnv: Readonly<Record<string, string>>;
  /** The key files, as `pnpm start` makes them. */
  readonly keys: LocalKeys;
  /** A token of `person` carrying `scopes`, for the one service they name (or `audience`). */
  token(person: PersonRole, scopes: readonly string[], audience?: string): Promise<string>;
  /** What the orchestrator sends with an irreversible call: its own token, bound to this one request. */
  boundToken<S extends DescService>(
    service: S,
    method: string,
    request: MessageInitShape<DescMethod["input"]>,
  ): Promise<string>;
}

let people: BenchPeople | undefined;

export function benchPeople(): BenchPeople {
  if (people) return people;
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-bench-people-"));
  process.once("exit", () => rmSync(dataDir, { recursive: true, force: true }));
  const keys = ensureLocalKeys(dataDir);
  // Every tool process of a bench gets this one environment; each reads only its own call key.
  const callKeys = toolServicesOf(contractFiles).map((service) => {
    const tool = servicePolicy(service).toolName;
    return [`${envPrefixOf(tool)}_CALL_KEYS_FILE`, localToolCallKeys(keys, tool)];
  });
  const env = { LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: keys.jwks, ...Object.fromEntries(callKeys) };
  const orchestratorKey = readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator });
  people = {
    env,
    keys,
    orchestratorEnv: {
      LOOPGUARD_JWKS: "",
      LOOPGUARD_JWKS_FILE: keys.jwks,
      LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
      LOOPGUARD_CALL_SECRETS_FILE: keys.callSecrets,
    },
    token(person, scopes, audience = audienceOf(scopes, servicesOf(contractFiles))) {
      if (!audience) throw new Error(`scopes ${scopes.join(" ")} do not name one service`);
      const { key, binding } = personKey({ LOOPGUARD_DATA_DIR: dataDir }, person);
      return mintToken(key, { subject: binding.subject, audience, scopes, ttlSeconds: 3600 });
    },
    boundToken(service, method, request) {
      const found = service.methods.find((m) => m.name === method)!;
      const scope = methodPolicy(found).requiredScope;
      return mintToken(orchestratorKey, {
        subject: "session:bench",
        audience: servicePolicy(service).toolName,
        scopes: scope ? [scope] : [],
        requestDigest: requestDigest(found.input, create(found.input, request)),
        ttlSeconds: 600,
      });
    },
  };
  return people;
}
