#!/usr/bin/env node
// The orchestrator's call secrets and each tool's call key, for deployments (`pnpm start` makes the
// local ones). The orchestrator mints tool calls' credentials with the first secret of its file; a
// tool holds only its own key under each secret (HKDF of the secret and the tool's name).
//   pnpm call-keys new --kid K [--secrets FILE]       adds a secret, last: held by the tools once derived, not yet minting
//   pnpm call-keys activate --kid K [--secrets FILE]  puts it first: the orchestrator mints with it within about a second
//   pnpm call-keys remove --kid K [--secrets FILE]    drops a retired secret (never the one minting)
//   pnpm call-keys derive --tool T [--secrets FILE] [--out FILE]   writes tool T's key file (0600): its key under every secret
// Rotation: new → derive for every tool and update their Secrets → activate → once no credential of
// the old secret can be live (a call's deadline plus 5 s) remove → derive again.
import { existsSync, readFileSync } from "node:fs";
import { contractFiles } from "@loopguard/proto";
import { KeyError } from "../auth.js";
import { subcommandArgs } from "../cli-options.js";
import { newCallSecret, readCallKeys, toolCallKeys } from "../call-keys.js";
import { servicePolicy, toolServicesOf } from "../contract.js";
import { FileWriteError, writeFileAtomically } from "../secret-file.js";

const USAGE = `usage: pnpm call-keys new --kid KID [--secrets FILE]
       pnpm call-keys activate --kid KID [--secrets FILE]
       pnpm call-keys remove --kid KID [--secrets FILE]
       pnpm call-keys derive --tool TOOL [--secrets FILE] [--out FILE]
  FILE defaults to call-secrets.json (the orchestrator's LOOPGUARD_CALL_SECRETS_FILE); derive writes
  call-keys-TOOL.json (that tool's <TOOL>_CALL_KEYS_FILE) unless --out names another file.
`;

function fail(message: string): never {
  process.stderr.write(`call-keys: ${message}\n`);
  process.exit(2);
}

type Values = { kid?: string; tool?: string; secrets?: string; out?: string };
const { command, values } = subcommandArgs<Values>("call-keys", USAGE, ["new", "activate", "remove", "derive"], {
  kid: { type: "string" },
  tool: { type: "string" },
  secrets: { type: "string", default: "call-secrets.json" },
  out: { type: "string" },
});
const file = values.secrets ?? "call-secrets.json";

type Secret = Record<string, unknown> & { kid: string };

function readSecrets(mayBeMissing: boolean): Secret[] {
  if (!existsSync(file)) {
    if (mayBeMissing) return [];
    fail(`${file} does not exist (pnpm call-keys new --kid … makes it)`);
  }
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    fail(`${file} is not JSON`);
  }
  try {
    readCallKeys(value);
  } catch (error) {
    fail(`${file}: ${error instanceof KeyError ? error.message : "not a call key set"}`);
  }
  return (value as { keys: Secret[] }).keys;
}

/** Written whole then renamed, so an orchestrator following the file never reads half of it. */
function write(path: string, value: unknown): void {
  try {
    writeFileAtomically(path, `${JSON.stringify(value, null, 2)}\n`, 0o600);
  } catch (error) {
    if (error instanceof FileWriteError) fail(error.message);
    throw error;
  }
}

if (command === "derive") {
  const tools = toolServicesOf(contractFiles).map((s) => servicePolicy(s).toolName);
  const tool = values.tool ?? fail(`--tool is required: one of ${tools.join(", ")}`);
  if (!tools.includes(tool)) fail(`--tool ${tool} is not a tool of the contracts (${tools.join(", ")})`);
  const out = values.out ?? `call-keys-${tool}.json`;
  write(out, toolCallKeys(readCallKeys({ keys: readSecrets(false) }), tool));
  process.stdout.write(`${out}: ${tool}'s call key under each secret of ${file} (give it to ${tool} alone)\n`);
} else {
  const kid = values.kid ?? "";
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(kid)) fail("--kid must be 1..64 letters, digits, '.', '_' or '-'");
  const secrets = readSecrets(command === "new");
  const index = secrets.findIndex((k) => k.kid === kid);
  if (command === "new") {
    if (index >= 0) fail(`${file} already has a secret "${kid}"`);
    write(file, { keys: [...secrets, newCallSecret(kid)] });
    process.stdout.write(
      secrets.length === 0
        ? `${file}: secret "${kid}", minting (derive each tool's key next)\n`
        : `${file}: secret "${kid}" added last; derive every tool's key, update their Secrets, then activate it\n`,
    );
  } else if (index < 0) {
    fail(`${file} has no secret "${kid}"`);
  } else if (command === "activate") {
    write(file, { keys: [secrets[index], ...secrets.filter((_, i) => i !== index)] });
    process.stdout.write(`${file}: secret "${kid}" first; the orchestrator mints with it within about a second\n`);
  } else {
    if (index === 0) fail(`"${kid}" is the secret minting now; activate its successor first`);
    write(file, { keys: secrets.filter((_, i) => i !== index) });
    process.stdout.write(`${file}: secret "${kid}" removed; derive every tool's key again\n`);
  }
}
