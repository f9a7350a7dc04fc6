#!/usr/bin/env node
// loopguard-smoke: a tool's synthetic checks from the command line, as a release's analysis Job
// runs them against the new pods (and as anyone may against a running tool):
//   loopguard-smoke --tool billing --target billing-preview.loopguard.svc.cluster.local:50062 [--count N] [--over SECONDS]
// It sends the call the tool's contract declares (smoke_check) with a probe key's token carrying
// that method's scope only, prints one line, and exits 0 when no more calls failed than a version
// within --error-budget would fail (default: the method's error-rate budget; see allowedFailures),
// 1 when more did, 2 on a usage error.
import { parseArgs } from "node:util";
import { contractFiles } from "@loopguard/proto";
import { resolve } from "node:path";
import { numberOption, UsageError } from "../cli-options.js";
import { readSigningKey } from "../config.js";
import { ConfigError } from "../settings.js";
import { servicePolicy, toolServicesOf } from "../contract.js";
import { localKeyPaths } from "../local-keys.js";
import { SMOKE_SUBJECT } from "../people.js";
import { describeSmoke, runSmoke, type SmokeCall, smokeCallOf, smokeCount, smokePassed, smokeToken } from "../smoke.js";

const USAGE = `usage: loopguard-smoke --tool TOOL --target HOST:PORT [--target …] [--count N] [--concurrency N] [--over SECONDS] [--error-budget R] [--key FILE] [--subject S] [--json]
  the probe key: --key, else LOOPGUARD_SMOKE_KEY_FILE, else the local suite's (.data/keys/smoke.jwk); its subject: --subject, else ${SMOKE_SUBJECT}`;

async function main(): Promise<number> {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      options: {
        tool: { type: "string" },
        target: { type: "string", multiple: true },
        count: { type: "string" },
        concurrency: { type: "string" },
        over: { type: "string" },
        "error-budget": { type: "string" },
        key: { type: "string" },
        subject: { type: "string" },
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    throw new UsageError(`${(error as Error).message.split(". ")[0]}\n${USAGE}`);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const tools = toolServicesOf(contractFiles);
  const service = tools.find((s) => servicePolicy(s).toolName === values.tool);
  if (!service)
    throw new UsageError(
      `--tool must be one of ${tools.map((s) => servicePolicy(s).toolName).join(", ")}, got "${values.tool ?? ""}"\n${USAGE}`,
    );
  const targets = (values.target as string[] | undefined) ?? [];
  if (targets.length === 0) throw new UsageError(`name at least one --target host:port\n${USAGE}`);
  let call: SmokeCall;
  try {
    call = smokeCallOf(service);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const count = numberOption(values.count as string | undefined, "count", smokeCount(call), 1, 100_000);
  const concurrency = numberOption(values.concurrency as string | undefined, "concurrency", 4, 1, 256);
  const overSeconds = numberOption(values.over as string | undefined, "over", 0, 0, 3600, false);
  const errorBudget = numberOption(
    values["error-budget"] as string | undefined,
    "error-budget",
    call.errorRateBudget,
    0,
    1,
    false,
  );
  const keyFile =
    (values.key as string | undefined) ??
    process.env.LOOPGUARD_SMOKE_KEY_FILE ??
    localKeyPaths(resolve(process.env.LOOPGUARD_DATA_DIR || ".data")).smoke;
  let token: string;
  try {
    token = await smokeToken(
      call,
      readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: keyFile }),
      (values.subject as string | undefined) ?? SMOKE_SUBJECT,
      overSeconds + 300,
    );
  } catch (error) {
    throw new UsageError(
      error instanceof ConfigError
        ? error.message.replace("LOOPGUARD_SIGNING_KEY_FILE", "the probe key")
        : (error as Error).message,
    );
  }
  const result = await runSmoke(call, { targets, token, count, concurrency, spreadMs: overSeconds * 1000 });
  const passed = smokePassed(result, errorBudget);
  process.stdout.write(
    values.json
      ? `${JSON.stringify({ ...result, latenciesMs: undefined, passed, errorBudget })}\n`
      : `${describeSmoke(result, errorBudget)} → ${targets.join(", ")}\n`,
  );
  return passed ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`loopguard-smoke: ${(error as Error).message}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  },
);
