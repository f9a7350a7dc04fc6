// The local suite's keys, made once under the data folder by `pnpm start`: the orchestrator's
// signing key (tool calls), an operator key for the CLI and `pnpm mint-token`, and the JWKS of both
// public halves that every service verifies with. Clusters mount their own from Secrets.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { newKeyPair, type SigningKey } from "./auth.js";
import { ConfigError, readSigningKey } from "./config.js";

export interface LocalKeys {
  readonly dir: string;
  /** Public keys of both: LOOPGUARD_JWKS_FILE of every service. */
  readonly jwks: string;
  /** The orchestrator's private key: its LOOPGUARD_SIGNING_KEY_FILE, and no one else's. */
  readonly orchestrator: string;
  /** The local operator's private key: what `pnpm loopguard` and `pnpm mint-token` sign with. */
  readonly operator: string;
}

export function localKeyPaths(dataDir: string): LocalKeys {
  const dir = join(dataDir, "keys");
  return { dir, jwks: join(dir, "jwks.json"), orchestrator: join(dir, "orchestrator.jwk"), operator: join(dir, "operator.jwk") };
}

/** Makes the keys that are missing (private keys 0600 in a 0700 folder) and returns where they are. */
export function ensureLocalKeys(dataDir: string): LocalKeys {
  const paths = localKeyPaths(dataDir);
  if (existsSync(paths.jwks) && existsSync(paths.orchestrator) && existsSync(paths.operator)) return paths;
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  const stamp = new Date().toISOString().slice(0, 10);
  const publicKeys = [];
  for (const [name, path] of [
    ["orchestrator", paths.orchestrator],
    ["operator", paths.operator],
  ] as const) {
    if (existsSync(path)) {
      const { d: _private, ...publicJwk } = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
      publicKeys.push(publicJwk);
      continue;
    }
    const { privateJwk, publicJwk } = newKeyPair(`local-${name}-${stamp}`);
    writeFileSync(path, `${JSON.stringify(privateJwk)}\n`, { mode: 0o600, flag: "wx" });
    publicKeys.push(publicJwk);
  }
  // Written whole then renamed, so a service starting at the same moment never reads half a file.
  writeFileSync(`${paths.jwks}.tmp`, `${JSON.stringify({ keys: publicKeys }, null, 2)}\n`, { mode: 0o644 });
  renameSync(`${paths.jwks}.tmp`, paths.jwks);
  return paths;
}

/**
 * The key a developer's command signs with: LOOPGUARD_SIGNING_KEY_FILE when set, else the local
 * suite's operator key. Throws ConfigError naming what to do when there is none.
 */
export function operatorSigningKey(env: Readonly<Record<string, string | undefined>> = process.env): SigningKey {
  if (env.LOOPGUARD_SIGNING_KEY_FILE) return readSigningKey(env);
  const local = localKeyPaths(resolve(env.LOOPGUARD_DATA_DIR || ".data")).operator;
  if (!existsSync(local)) throw new ConfigError(`no signing key: set LOOPGUARD_SIGNING_KEY_FILE or run \`pnpm start\` once (it creates ${local})`);
  return readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: local });
}
