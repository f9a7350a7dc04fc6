#!/usr/bin/env node
// Key management for deployments. Every public key in the JWKS is bound to who may use it: a role
// (orchestrator | person | break-glass | probe), the subject its tokens must claim and the scopes they may carry.
// Only an orchestrator key is bound to a subject pattern ('session:*'); every other key to exactly one subject.
//   pnpm keys new --kid K --role R --subject S --scope SCOPE… [--private-out FILE] [--jwks FILE]
//     an Ed25519 key pair: the private JWK (0600) for its one holder, the public half with its binding added to the JWKS.
//   pnpm keys bind --kid K --role R --subject S --scope SCOPE… [--jwks FILE]   (re)binds a key already in the JWKS.
//   pnpm keys revoke --kid K [--jwks FILE]   drops it and records it as revoked: services stop trusting it within ~1 s, and no key reuses its kid.
//   pnpm keys remove --kid K [--jwks FILE]   drops a retired key after rotation.
// Rotation: `new` (both keys trusted) → roll out the JWKS → switch the signer's key → `remove` the old.
import { existsSync, readFileSync, rmSync } from "node:fs";
import { KeyError, newKeyPair } from "../auth.js";
import { subcommandArgs } from "../cli-options.js";
import type { KeyRole } from "../auth.js";
import { bindingProblem, type KeyBinding, publicKeySet, withBinding } from "../key-bindings.js";
import { irreversibleMethodOf, readOnlyToolScopes, SMOKE_SUBJECT } from "../people.js";
import { FileWriteError, writeFileAtomically } from "../secret-file.js";

function fail(message: string): never {
  process.stderr.write(`keys: ${message}\n`);
  process.exit(2);
}

const USAGE = `usage: pnpm keys new --kid KID --role orchestrator|person|break-glass|probe --subject S --scope SCOPE… [--private-out FILE] [--jwks FILE]
       pnpm keys bind --kid KID --role orchestrator|person|break-glass|probe --subject S --scope SCOPE… [--jwks FILE]
       pnpm keys revoke --kid KID [--jwks FILE]
       pnpm keys remove --kid KID [--jwks FILE]
  an orchestrator key: --subject 'session:*' and the tool methods' scopes; a person: their one name (never a pattern) and scopes (never an irreversible method's);
  a break-glass key: one person's name and the irreversible scope it may use, accepted only where <TOOL>_BREAK_GLASS=on;
  a probe key (a release's smoke calls): --subject ${SMOKE_SUBJECT} and read-only scopes (${readOnlyToolScopes().join(" ")}), accepted on read-only methods only
`;

type Values = {
  kid?: string;
  role?: string;
  subject?: string;
  scope?: string[];
  "private-out"?: string;
  jwks?: string;
};
const { command, values } = subcommandArgs<Values>("keys", USAGE, ["new", "bind", "revoke", "remove"], {
  kid: { type: "string" },
  role: { type: "string" },
  subject: { type: "string" },
  scope: { type: "string", multiple: true },
  "private-out": { type: "string" },
  jwks: { type: "string", default: "jwks.json" },
});
const kid = values.kid ?? "";
if (!/^[A-Za-z0-9._-]{1,64}$/.test(kid)) fail("--kid must be 1..64 letters, digits, '.', '_' or '-'");
const jwksPath = values.jwks ?? "jwks.json";

/** Stands in for a missing binding while `bind` checks the rest of an older JWKS; never written. */
const PLACEHOLDER: KeyBinding = { role: "person", subject: "unbound", scopes: [] };

type Jwks = { keys: Record<string, unknown>[]; revoked: string[] };

function readJwks(): Jwks {
  if (!existsSync(jwksPath)) return { keys: [], revoked: [] };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(jwksPath, "utf8"));
  } catch {
    fail(`${jwksPath} is not JSON`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    fail(`${jwksPath} is not a JWKS: a JSON object with "keys" expected`);
  // `bind` is how the keys of an older JWKS get their bindings, so for it a key may still lack one;
  // and the key `bind`, `revoke` or `remove` acts on may have a binding no longer accepted (a person
  // key bound to a pattern): that command is how it is fixed.
  const keys = (raw as { keys?: unknown }).keys;
  const fixing = (k: Record<string, unknown>) =>
    (command === "bind" && k?.loopguard_role === undefined) || (command !== "new" && k?.kid === kid);
  const checked = Array.isArray(keys)
    ? keys.map((k: Record<string, unknown>) => (fixing(k) ? withBinding(k, PLACEHOLDER) : k))
    : keys;
  try {
    const set = publicKeySet({ ...(raw as object), keys: checked });
    return { keys: keys as Record<string, unknown>[], revoked: [...(set.revoked ?? [])] };
  } catch (error) {
    fail(`${jwksPath}: ${error instanceof KeyError ? error.message : "not a JWKS"}`);
  }
}

/** Writes one file whole (see writeFileAtomically); a failure is one line naming the file, exit 2. */
function write(path: string, text: string, mode: number, replace = true): void {
  try {
    writeFileAtomically(path, text, mode, replace);
  } catch (error) {
    if (error instanceof FileWriteError) fail(error.message);
    throw error;
  }
}

function jwksText(jwks: Jwks): string {
  return `${JSON.stringify(jwks.revoked.length > 0 ? jwks : { keys: jwks.keys }, null, 2)}\n`;
}

function writeJwks(jwks: Jwks): void {
  write(jwksPath, jwksText(jwks), 0o644);
}

/** The binding the command line asks for, checked. */
function requestedBinding(): KeyBinding {
  if (!values.role) fail("--role is required: orchestrator, person, break-glass or probe");
  if (!values.subject)
    fail(
      "--subject is required: the subject this key's tokens must claim ('session:*' for the orchestrator, a person's name otherwise)",
    );
  const binding = { role: values.role as KeyRole, subject: values.subject, scopes: values.scope ?? [] };
  const problem = bindingProblem(binding);
  if (problem)
    fail(
      problem
        .replace(/^loopguard_role/, "--role")
        .replace(/^loopguard_subject/, "--subject")
        .replace(/^loopguard_scopes/, "--scope"),
    );
  if (binding.scopes.length === 0) fail("name at least one --scope the key's tokens may carry");
  if (binding.role === "person") {
    for (const scope of binding.scopes) {
      const method = irreversibleMethodOf(scope);
      if (method)
        fail(
          `a person's key may not hold "${scope}": it is (or covers) the scope of ${method}, which only the orchestrator may call, bound to one request (a break-glass key is --role break-glass)`,
        );
    }
  }
  return binding;
}

const jwks = readJwks();
const index = jwks.keys.findIndex((k) => k.kid === kid);
if (command === "new") {
  const binding = requestedBinding();
  if (index >= 0) fail(`${jwksPath} already has a key "${kid}"`);
  if (jwks.revoked.includes(kid)) fail(`"${kid}" was revoked; a revoked kid is never used again: choose another`);
  const privateOut = values["private-out"] ?? `${kid}.private.jwk`;
  if (existsSync(privateOut)) fail(`${privateOut} exists; not overwriting a private key`);
  const { privateJwk, publicJwk } = newKeyPair(kid);
  write(privateOut, `${JSON.stringify(privateJwk)}\n`, 0o600, false);
  try {
    writeFileAtomically(jwksPath, jwksText({ ...jwks, keys: [...jwks.keys, withBinding(publicJwk, binding)] }), 0o644);
  } catch (error) {
    // A private key whose public half is in no JWKS is of no use, and would make a re-run refuse.
    rmSync(privateOut, { force: true });
    fail(error instanceof FileWriteError ? `${error.message} (${privateOut} not kept)` : "the JWKS was not written");
  }
  process.stdout.write(
    `private key ${privateOut} (keep it secret; give it only to its one holder)\npublic key "${kid}" added to ${jwksPath}: ${binding.role} "${binding.subject}", scopes ${binding.scopes.join(" ")}\n`,
  );
} else if (command === "bind") {
  const binding = requestedBinding();
  if (index < 0) fail(`${jwksPath} has no key "${kid}"${jwks.revoked.includes(kid) ? " (it was revoked)" : ""}`);
  writeJwks({ ...jwks, keys: jwks.keys.map((k, i) => (i === index ? withBinding(k, binding) : k)) });
  process.stdout.write(
    `key "${kid}" in ${jwksPath} bound: ${binding.role} "${binding.subject}", scopes ${binding.scopes.join(" ")}\n`,
  );
} else if (command === "revoke") {
  if (index < 0)
    fail(jwks.revoked.includes(kid) ? `"${kid}" is already revoked in ${jwksPath}` : `${jwksPath} has no key "${kid}"`);
  writeJwks({ keys: jwks.keys.filter((_, i) => i !== index), revoked: [...jwks.revoked, kid] });
  process.stdout.write(
    `key "${kid}" revoked in ${jwksPath}: every service following this file refuses its tokens within about a second\n`,
  );
} else {
  if (index < 0) fail(`${jwksPath} has no key "${kid}"`);
  if (jwks.keys.length === 1) fail(`removing "${kid}" would leave ${jwksPath} empty; add its successor first`);
  writeJwks({ ...jwks, keys: jwks.keys.filter((_, i) => i !== index) });
  process.stdout.write(`public key "${kid}" removed from ${jwksPath}\n`);
}
