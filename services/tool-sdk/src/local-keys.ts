// The local suite's keys, under the data folder, checked on every `pnpm start`: the orchestrator's
// signing key and its call secrets (tool calls of sessions), one key per local person (requester,
// approver, operator), the release's probe key (smoke calls, read-only methods only), the JWKS of
// their public halves, each bound to its role, subject and scopes, that every service verifies
// with, and each tool's own call key. Clusters mount their own from Secrets (`pnpm keys`).
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { KeyError, newKeyPair, publicXOf, type SigningKey, signingKeyFromJwk } from "./auth.js";
import { newCallSecret, readCallKeys, toolCallKeys } from "./call-keys.js";
import { dataDirOf, readPublicKeys, readSigningKey } from "./config.js";
import { writeFileAtomically } from "./secret-file.js";
import { ConfigError } from "./settings.js";
import {
  type BoundKeySet,
  bindingOf,
  type KeyBinding,
  scopeBeyond,
  scopeMatcher,
  withBinding,
} from "./key-bindings.js";
import {
  orchestratorScopes,
  PEOPLE,
  type PersonRole,
  personScopes,
  readOnlyToolScopes,
  SMOKE_SUBJECT,
} from "./people.js";

type Env = Readonly<Record<string, string | undefined>>;

export interface LocalKeys {
  readonly dir: string;
  /** Public keys of all, with their bindings: LOOPGUARD_JWKS_FILE of every service. */
  readonly jwks: string;
  /** The orchestrator's private key: its LOOPGUARD_SIGNING_KEY_FILE, and no one else's. */
  readonly orchestrator: string;
  /** Each local person's private key, e.g. people.approver = <dir>/approver.jwk. */
  readonly people: Readonly<Record<PersonRole, string>>;
  /** The release's probe key (`pnpm release` smoke calls): subject release-smoke, the tools' read-only scopes. */
  readonly smoke: string;
  /** The orchestrator's call secrets: its LOOPGUARD_CALL_SECRETS_FILE, and no one else's. */
  readonly callSecrets: string;
}

export function localKeyPaths(dataDir: string): LocalKeys {
  const dir = join(dataDir, "keys");
  return {
    dir,
    jwks: join(dir, "jwks.json"),
    orchestrator: join(dir, "orchestrator.jwk"),
    people: Object.fromEntries(PEOPLE.map((p) => [p, join(dir, `${p}.jwk`)])) as Record<PersonRole, string>,
    smoke: join(dir, "smoke.jwk"),
    callSecrets: join(dir, "call-secrets.json"),
  };
}

/** The bindings the local suite gives its keys, from the contracts. */
function localBindings(): [string, KeyBinding][] {
  const scopes = personScopes();
  return [
    ["orchestrator", { role: "orchestrator", subject: "session:*", scopes: orchestratorScopes() }],
    ...PEOPLE.map((p): [string, KeyBinding] => [p, { role: "person", subject: p, scopes: scopes[p] }]),
    ["smoke", { role: "probe", subject: SMOKE_SUBJECT, scopes: readOnlyToolScopes() }],
  ];
}

/** A key file's JSON; one that cannot be read or parsed is a ConfigError naming it (never its text). */
function readKeyFile(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    const why = error instanceof SyntaxError ? "not JSON" : ((error as NodeJS.ErrnoException).code ?? "unreadable");
    throw new ConfigError(
      `${path} is not a key file that can be read (${why}); move it away and start again to have a new one made`,
    );
  }
}

/** A local person's private key file, read and checked as a key (JSON that is no key would put a broken key in the JWKS). */
function privateKeyFile(path: string): Record<string, unknown> {
  const value = readKeyFile(path);
  try {
    signingKeyFromJwk(value);
  } catch (error) {
    if (!(error instanceof KeyError)) throw error;
    throw new ConfigError(
      `${path} is not a key file that can be read (${error.message}); move it away and start again to have a new one made`,
    );
  }
  return value as Record<string, unknown>;
}

function readExisting(path: string): { keys: Record<string, unknown>[]; revoked: string[] } {
  if (!existsSync(path)) return { keys: [], revoked: [] };
  const value = (readKeyFile(path) ?? {}) as { keys?: Record<string, unknown>[]; revoked?: string[] };
  return {
    keys: Array.isArray(value.keys) ? value.keys : [],
    revoked: Array.isArray(value.revoked) ? value.revoked : [],
  };
}

/**
 * Makes the keys that are missing (private keys 0600 in a 0700 folder) and rebuilds the JWKS from
 * the private key files with today's bindings, so an older folder is upgraded (its operator key
 * becomes the operator person). A key revoked in the JWKS is replaced by a new one, never trusted
 * again; keys added with `pnpm keys` are kept as they are.
 */
export function ensureLocalKeys(dataDir: string): LocalKeys {
  const paths = localKeyPaths(dataDir);
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  const existing = readExisting(paths.jwks);
  const stamp = new Date().toISOString().slice(0, 10);
  const managed: Record<string, unknown>[] = [];
  for (const [name, binding] of localBindings()) {
    const path = join(paths.dir, `${name}.jwk`);
    let privateJwk = existsSync(path) ? privateKeyFile(path) : undefined;
    if (!privateJwk || existing.revoked.includes(String(privateJwk.kid))) {
      privateJwk = newKeyPair(`local-${name}-${stamp}-${randomBytes(3).toString("hex")}`).privateJwk as Record<
        string,
        unknown
      >;
      writeFileAtomically(path, `${JSON.stringify(privateJwk)}\n`, 0o600);
    }
    const { d: _private, ...publicJwk } = privateJwk;
    managed.push(withBinding(publicJwk, binding));
  }
  const managedKids = new Set(managed.map((k) => k.kid));
  const jwks = {
    keys: [...managed, ...existing.keys.filter((k) => !managedKids.has(k.kid))],
    ...(existing.revoked.length > 0 ? { revoked: existing.revoked } : {}),
  };
  const text = `${JSON.stringify(jwks, null, 2)}\n`;
  if (!existsSync(paths.jwks) || readFileSync(paths.jwks, "utf8") !== text)
    writeFileAtomically(paths.jwks, text, 0o644);
  if (!existsSync(paths.callSecrets)) {
    const secret = newCallSecret(`local-call-${stamp}-${randomBytes(3).toString("hex")}`);
    writeFileAtomically(paths.callSecrets, `${JSON.stringify({ keys: [secret] })}\n`, 0o600);
  }
  return paths;
}

/**
 * One tool's call keys (its <PREFIX>_CALL_KEYS_FILE), derived from the local call secrets and
 * rewritten when they changed: the tool is given its own key and never the secrets.
 */
export function localToolCallKeys(keys: LocalKeys, tool: string): string {
  const path = join(keys.dir, "call-keys", `${tool}.json`);
  mkdirSync(join(keys.dir, "call-keys"), { recursive: true, mode: 0o700 });
  let secrets: ReturnType<typeof readCallKeys>;
  try {
    secrets = readCallKeys(readKeyFile(keys.callSecrets));
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`${keys.callSecrets}: ${(error as Error).message}`);
  }
  const text = `${JSON.stringify(toolCallKeys(secrets, tool))}\n`;
  if (!existsSync(path) || readFileSync(path, "utf8") !== text) writeFileAtomically(path, text, 0o600);
  return path;
}

/** One person's key and what its binding in the JWKS lets it sign. */
export interface PersonKey {
  /** The name it was chosen by (--as), or the key file's kid. */
  readonly name: string;
  readonly key: SigningKey;
  readonly binding: KeyBinding;
  /** The first of `scopes` the key may not sign, if any. */
  scopeBeyond(scopes: Iterable<string>): string | undefined;
}

const PERSON_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * The JWKS a developer's command trusts, as the local suite's services do: LOOPGUARD_JWKS_FILE (followed) or
 * LOOPGUARD_JWKS, else the one `pnpm start` made under the data folder (followed).
 */
export function suiteJwks(env: Env = process.env): {
  readonly publicKeys: BoundKeySet;
  readonly publicKeysFile?: string;
} {
  if (env.LOOPGUARD_JWKS_FILE || env.LOOPGUARD_JWKS)
    return {
      publicKeys: readPublicKeys(env),
      ...(env.LOOPGUARD_JWKS_FILE ? { publicKeysFile: env.LOOPGUARD_JWKS_FILE } : {}),
    };
  const local = localKeyPaths(dataDirOf(env)).jwks;
  if (!existsSync(local))
    throw new ConfigError(`no JWKS: set LOOPGUARD_JWKS_FILE or run \`pnpm start\` once (it creates ${local})`);
  return { publicKeys: readPublicKeys({ LOOPGUARD_JWKS_FILE: local }), publicKeysFile: local };
}

/**
 * The key a developer's command signs with, acting as one person: `.data/keys/<as>.jwk` (as:
 * --as, else LOOPGUARD_AS, else "requester"), or LOOPGUARD_SIGNING_KEY_FILE. Its binding in the
 * JWKS decides the subject and the scopes. Throws ConfigError naming what to do.
 */
export function personKey(env: Env = process.env, as?: string): PersonKey {
  const dataDir = dataDirOf(env);
  const chosen = as ?? env.LOOPGUARD_AS;
  let key: SigningKey;
  let name: string;
  if (env.LOOPGUARD_SIGNING_KEY_FILE) {
    if (chosen !== undefined)
      throw new ConfigError("choose the person with --as/LOOPGUARD_AS or with LOOPGUARD_SIGNING_KEY_FILE, not both");
    key = readSigningKey(env);
    name = key.kid;
  } else {
    name = chosen ?? "requester";
    if (!PERSON_NAME.test(name))
      throw new ConfigError(`--as must be a key name such as requester, approver or operator, got "${name}"`);
    const file = join(localKeyPaths(dataDir).dir, `${name}.jwk`);
    if (!existsSync(file)) {
      throw new ConfigError(
        `no key for "${name}": ${file} does not exist (the local people are ${PEOPLE.join(", ")}, made by \`pnpm start\`; \`pnpm keys new\` makes another)`,
      );
    }
    key = readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: file });
  }
  const jwks = suiteJwks(env).publicKeys;
  const published = jwks.keys.find((k) => k.kid === key.kid) as Record<string, unknown> | undefined;
  if (!published) {
    throw new ConfigError(
      `key ${key.kid} is ${jwks.revoked?.includes(key.kid) ? "revoked" : "not in the JWKS"}: services would refuse its tokens`,
    );
  }
  // The kid alone matches any file that says it: tokens signed with another key's d would all be refused.
  if (published.x !== publicXOf(key))
    throw new ConfigError(
      `the private key of ${key.kid} is not the key the JWKS publishes as ${key.kid}: its tokens would not verify`,
    );
  const binding = bindingOf(published) as KeyBinding;
  const matcher = scopeMatcher(binding.scopes);
  return { name, key, binding, scopeBeyond: (scopes) => scopeBeyond(matcher, scopes) };
}
