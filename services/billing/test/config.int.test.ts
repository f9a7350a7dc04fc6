// dist/main.js (run `pnpm build` first) with a BILLING_STORE it cannot use: one line on stderr
// naming the variable, without the password, exit code 2, nothing served.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { TEST_AUTH_ENV } from "@loopguard/tool-sdk/testing";
import { afterAll, expect, it } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const dataDir = mkdtempSync(join(tmpdir(), "billing-config-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

it.each([
  [
    "another database",
    "mysql://billing:hunter2@db.internal/billing",
    /^billing: configuration error: BILLING_STORE must be sqlite:<file> or postgres:\/\/.*\n$/,
  ],
  ["a SQLite URL without a file", "sqlite:", /^billing: configuration error: BILLING_STORE names no SQLite file/],
  [
    "a malformed PostgreSQL URL",
    "postgres://billing:hunter2@db:port/billing",
    /^billing: configuration error: BILLING_STORE is not a valid PostgreSQL URL/,
  ],
])("exits 2 naming BILLING_STORE when it names %s", (_, store, message) => {
  const run = spawnSync(process.execPath, [MAIN], {
    env: {
      ...process.env,
      ...TEST_AUTH_ENV,
      LOOPGUARD_DATA_DIR: dataDir,
      BILLING_PORT: "0",
      BILLING_METRICS_PORT: "0",
      BILLING_STORE: store,
    },
    encoding: "utf8",
    timeout: 15_000,
  });
  expect(run.status).toBe(2);
  expect(run.stderr).toMatch(message);
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  expect(run.stderr + run.stdout).not.toContain("hunter2");
  expect(run.stdout).not.toContain('"msg":"serving"');
});
