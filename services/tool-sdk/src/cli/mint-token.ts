#!/usr/bin/env node
// Mints a short-lived development token for calling a service by hand, e.g.
//   pnpm mint-token --scope billing:refund --scope billing:read
// The audience (the one service that will accept it) is read from the contracts: the service whose
// methods require those scopes; name it with --audience when the scopes do not say. Signed with
// LOOPGUARD_SIGNING_KEY_FILE, or the local suite's operator key (.data/keys/operator.jwk).
import { parseArgs } from "node:util";
import { contractFiles } from "@loopguard/proto";
import { mintToken } from "../auth.js";
import { ConfigError } from "../config.js";
import { audienceOf, servicePolicy, servicesOf } from "../contract.js";
import { operatorSigningKey } from "../local-keys.js";

function fail(message: string): never {
  process.stderr.write(`mint-token: ${message}\n`);
  process.exit(2);
}

let values: { scope?: string[]; subject?: string; ttl?: string; audience?: string; help?: boolean };
try {
  ({ values } = parseArgs({
    options: {
      scope: { type: "string", multiple: true, short: "s" },
      audience: { type: "string", short: "a" },
      subject: { type: "string", default: "developer" },
      ttl: { type: "string", default: "3600" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
const services = servicesOf(contractFiles);
const known = services.map((s) => servicePolicy(s).toolName).filter((name) => name !== "tool-admin");
if (values.help) {
  process.stdout.write(`usage: pnpm mint-token --scope SCOPE [--scope SCOPE…] [--audience SERVICE] [--subject NAME] [--ttl SECONDS]\n  services: ${known.join(", ")}\n`);
  process.exit(0);
}
const scopes = values.scope ?? [];
if (scopes.length === 0) fail("name at least one --scope, e.g. --scope kb:read");
const ttl = Number(values.ttl);
if (!Number.isInteger(ttl) || ttl < 1 || ttl > 86_400) fail(`--ttl must be 1..86400 seconds, got "${values.ttl}"`);
if (values.audience !== undefined && !known.includes(values.audience)) fail(`--audience must be one of ${known.join(", ")}, got "${values.audience}"`);
const audience = values.audience ?? audienceOf(scopes, services);
if (!audience) fail(`the scopes ${scopes.join(" ")} do not name one service; add --audience (one of ${known.join(", ")})`);

try {
  const token = await mintToken(operatorSigningKey(), { subject: values.subject ?? "developer", audience, scopes, ttlSeconds: ttl });
  process.stdout.write(`${token}\n`);
} catch (error) {
  fail(error instanceof ConfigError ? error.message : "could not mint a token");
}
