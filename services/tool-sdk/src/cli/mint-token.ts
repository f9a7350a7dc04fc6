#!/usr/bin/env node
// Mints a short-lived token for calling a service by hand, as one person, e.g.
//   pnpm mint-token --as operator --scope kb:read
// The key is .data/keys/<NAME>.jwk (--as, else LOOPGUARD_AS, else requester) or
// LOOPGUARD_SIGNING_KEY_FILE; the token's subject is the one the key is bound to in the JWKS, and
// it may carry only scopes that binding allows. No person mints an irreversible method's scope:
// only the orchestrator does, bound to one request. Break-glass (a break-glass key, a reason,
// accepted only where the service enables it): --break-glass --reason "…".
// The audience (the one service that will accept it) is read from the contracts: the service whose
// methods require those scopes; name it with --audience when the scopes do not say.
import { parseArgs } from "node:util";
import { contractFiles } from "@loopguard/proto";
import {
  BREAK_GLASS_MAX_REASON_CHARS,
  BREAK_GLASS_MAX_TTL_SECONDS,
  breakGlassReasonProblem,
  mintToken,
} from "../auth.js";
import { ConfigError } from "../settings.js";
import { audienceOf, servicePolicy, servicesOf } from "../contract.js";
import { type PersonKey, personKey } from "../local-keys.js";
import { irreversibleMethodOf } from "../people.js";

function fail(message: string): never {
  process.stderr.write(`mint-token: ${message}\n`);
  process.exit(2);
}

type Values = {
  scope?: string[];
  as?: string;
  subject?: string;
  ttl?: string;
  audience?: string;
  "break-glass"?: boolean;
  reason?: string;
  help?: boolean;
};
let values: Values;
try {
  ({ values } = parseArgs({
    options: {
      scope: { type: "string", multiple: true, short: "s" },
      audience: { type: "string", short: "a" },
      as: { type: "string" },
      subject: { type: "string" },
      ttl: { type: "string" },
      "break-glass": { type: "boolean" },
      reason: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
const services = servicesOf(contractFiles);
const known = services.map((s) => servicePolicy(s).toolName).filter((name) => name !== "tool-admin");
if (values.help) {
  process.stdout.write(
    `usage: pnpm mint-token --scope SCOPE [--scope SCOPE…] [--as NAME] [--audience SERVICE] [--ttl SECONDS]\n       pnpm mint-token --as NAME --break-glass --reason "why" --scope SCOPE [--ttl SECONDS]\n  services: ${known.join(", ")}\n`,
  );
  process.exit(0);
}
if (values.subject !== undefined)
  fail(
    "--subject is gone: a token's subject is the one its key is bound to; choose the person with --as NAME (or LOOPGUARD_AS)",
  );
const breakGlass = values["break-glass"] === true;
const reason = values.reason?.trim() ?? "";
if (values.reason !== undefined && !breakGlass) fail("--reason goes with --break-glass");
const reasonProblem = breakGlass ? breakGlassReasonProblem(reason) : undefined;
if (reasonProblem)
  fail(
    `--break-glass needs --reason "why" (one line, 1..${BREAK_GLASS_MAX_REASON_CHARS} characters), recorded with every use: ${reasonProblem}`,
  );
const scopes = values.scope ?? [];
if (scopes.length === 0) fail("name at least one --scope, e.g. --scope kb:read");
const maxTtl = breakGlass ? BREAK_GLASS_MAX_TTL_SECONDS : 86_400;
const ttl = Number(values.ttl ?? (breakGlass ? 300 : 3600));
if (!Number.isInteger(ttl) || ttl < 1 || ttl > maxTtl)
  fail(`--ttl must be 1..${maxTtl} seconds${breakGlass ? " for a break-glass token" : ""}, got "${values.ttl}"`);
if (values.audience !== undefined && !known.includes(values.audience))
  fail(`--audience must be one of ${known.join(", ")}, got "${values.audience}"`);
const audience = values.audience ?? audienceOf(scopes, services);
if (!audience)
  fail(`the scopes ${scopes.join(" ")} do not name one service; add --audience (one of ${known.join(", ")})`);

let person: PersonKey;
try {
  person = personKey(process.env, values.as);
} catch (error) {
  fail(error instanceof ConfigError ? error.message : "could not read the signing key");
}
const { role, subject } = person.binding;
if (breakGlass && role !== "break-glass")
  fail(
    `${person.name}'s key is a ${role} key; --break-glass needs a break-glass key (\`pnpm keys new --role break-glass …\`)`,
  );
const notPerson: Record<string, string> = {
  "break-glass": `${person.name}'s key is for break-glass only: add --break-glass --reason "why"`,
  orchestrator: `${person.name}'s key is the orchestrator's: it signs sessions' tool calls, not people's tokens`,
  probe: `${person.name}'s key is a probe key: it signs the release's smoke calls (\`pnpm smoke\`), not people's tokens`,
};
if (!breakGlass && role !== "person") fail(notPerson[role]!);
for (const scope of scopes) {
  const method = irreversibleMethodOf(scope);
  if (method && !breakGlass) {
    fail(
      `"${scope}" is the scope of ${method}, which moves what cannot be taken back: only the orchestrator mints it, bound to one request (break-glass: --break-glass --reason "…" with a break-glass key)`,
    );
  }
}
const beyond = person.scopeBeyond(scopes);
if (beyond !== undefined)
  fail(`${person.name}'s key may not carry "${beyond}" (it may carry: ${person.binding.scopes.join(" ")})`);
if (subject.endsWith("*"))
  fail(`${person.name}'s key is bound to the pattern "${subject}", not to one subject; a person's token names one`);

const token = await mintToken(person.key, {
  subject,
  audience,
  scopes,
  ttlSeconds: ttl,
  ...(breakGlass ? { breakGlassReason: reason } : {}),
});
process.stdout.write(`${token}\n`);
