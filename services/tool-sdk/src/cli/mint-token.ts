#!/usr/bin/env node
// Mints a short-lived development token for calling tools by hand, e.g.
//   pnpm mint-token --scope billing:refund --scope billing:read
// The secret is LOOPGUARD_AUTH_SECRET(_FILE), or the local suite's .data/auth-secret.
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { mintToken } from "../auth.js";
import { ConfigError, readAuthSecret } from "../config.js";
import { localSecretPath } from "../local-secret.js";

function fail(message: string): never {
  process.stderr.write(`mint-token: ${message}\n`);
  process.exit(2);
}

let values: { scope?: string[]; subject?: string; ttl?: string; help?: boolean };
try {
  ({ values } = parseArgs({
    options: {
      scope: { type: "string", multiple: true, short: "s" },
      subject: { type: "string", default: "developer" },
      ttl: { type: "string", default: "3600" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
if (values.help) {
  process.stdout.write("usage: pnpm mint-token --scope SCOPE [--scope SCOPE…] [--subject NAME] [--ttl SECONDS]\n");
  process.exit(0);
}
const scopes = values.scope ?? [];
if (scopes.length === 0) fail("name at least one --scope, e.g. --scope kb:read");
const ttl = Number(values.ttl);
if (!Number.isInteger(ttl) || ttl < 1 || ttl > 86_400) fail(`--ttl must be 1..86400 seconds, got "${values.ttl}"`);

const env = { ...process.env };
if (!env.LOOPGUARD_AUTH_SECRET && !env.LOOPGUARD_AUTH_SECRET_FILE) {
  const local = localSecretPath(resolve(env.LOOPGUARD_DATA_DIR || ".data"));
  if (!existsSync(local)) fail(`no secret: set LOOPGUARD_AUTH_SECRET or run \`pnpm start\` once (it creates ${local})`);
  env.LOOPGUARD_AUTH_SECRET_FILE = local;
}
try {
  const token = await mintToken(readAuthSecret(env), { subject: values.subject ?? "developer", scopes, ttlSeconds: ttl });
  process.stdout.write(`${token}\n`);
} catch (error) {
  fail(error instanceof ConfigError ? error.message : "could not mint a token");
}
