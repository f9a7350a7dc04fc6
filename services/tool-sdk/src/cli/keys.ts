#!/usr/bin/env node
// Key management for deployments:
//   pnpm keys new --kid orchestrator-2026-12 [--private-out FILE] [--jwks FILE]
//     makes an Ed25519 key pair: the private JWK (0600) for the one service that signs, its public
//     half added to the JWKS every service verifies with (created if missing).
//   pnpm keys remove --kid KID [--jwks FILE]      drops a retired public key from the JWKS.
// Rotation: `new` (both keys trusted) → roll out the JWKS → switch the signer's key → `remove` the old.
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { KeyError, newKeyPair, publicKeySet } from "../auth.js";

function fail(message: string): never {
  process.stderr.write(`keys: ${message}\n`);
  process.exit(2);
}

const USAGE = "usage: pnpm keys new --kid KID [--private-out FILE] [--jwks FILE]\n       pnpm keys remove --kid KID [--jwks FILE]\n";

let parsed: { values: { kid?: string; "private-out"?: string; jwks?: string; help?: boolean }; positionals: string[] };
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: { kid: { type: "string" }, "private-out": { type: "string" }, jwks: { type: "string", default: "jwks.json" }, help: { type: "boolean", short: "h" } },
  });
} catch (error) {
  fail((error as Error).message);
}
const { values, positionals } = parsed;
const [command] = positionals;
if (values.help || !command) {
  process.stdout.write(USAGE);
  process.exit(values.help ? 0 : 2);
}
const kid = values.kid ?? "";
if (!/^[A-Za-z0-9._-]{1,64}$/.test(kid)) fail("--kid must be 1..64 letters, digits, '.', '_' or '-'");
const jwksPath = values.jwks ?? "jwks.json";

function readJwks(): { keys: Record<string, unknown>[] } {
  if (!existsSync(jwksPath)) return { keys: [] };
  try {
    return publicKeySet(JSON.parse(readFileSync(jwksPath, "utf8"))) as unknown as { keys: Record<string, unknown>[] };
  } catch (error) {
    fail(`${jwksPath}: ${error instanceof KeyError ? error.message : "not JSON"}`);
  }
}

function writeJwks(jwks: { keys: unknown[] }): void {
  writeFileSync(`${jwksPath}.tmp`, `${JSON.stringify(jwks, null, 2)}\n`, { mode: 0o644 });
  renameSync(`${jwksPath}.tmp`, jwksPath);
}

const jwks = readJwks();
if (command === "new") {
  if (jwks.keys.some((k) => k.kid === kid)) fail(`${jwksPath} already has a key "${kid}"`);
  const privateOut = values["private-out"] ?? `${kid}.private.jwk`;
  if (existsSync(privateOut)) fail(`${privateOut} exists; not overwriting a private key`);
  const { privateJwk, publicJwk } = newKeyPair(kid);
  writeFileSync(privateOut, `${JSON.stringify(privateJwk)}\n`, { mode: 0o600, flag: "wx" });
  writeJwks({ keys: [...jwks.keys, publicJwk] });
  process.stdout.write(`private key ${privateOut} (keep it secret; give it only to the service that signs)\npublic key "${kid}" added to ${jwksPath}\n`);
} else if (command === "remove") {
  const kept = jwks.keys.filter((k) => k.kid !== kid);
  if (kept.length === jwks.keys.length) fail(`${jwksPath} has no key "${kid}"`);
  if (kept.length === 0) fail(`removing "${kid}" would leave ${jwksPath} empty; add its successor first`);
  writeJwks({ keys: kept });
  process.stdout.write(`public key "${kid}" removed from ${jwksPath}\n`);
} else {
  fail(`unknown command "${command}"\n${USAGE}`);
}
