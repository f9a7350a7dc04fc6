// dist/main.js (run `pnpm build` first) with a BILLING_STORE (or BILLING_STORE_FILE) it cannot use:
// one line on stderr naming the variable, without the password, exit code 2, nothing served; and the
// store URL read from the file BILLING_STORE_FILE names, as a pod mounts its DSN Secret.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { TEST_AUTH_ENV } from "@loopguard/tool-sdk/testing";
import { afterAll, describe, expect, it } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const dataDir = mkdtempSync(join(tmpdir(), "billing-config-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** Runs billing's main to its exit with `env` over the test keys and free ports. */
function run(env: Record<string, string>, args: string[] = []) {
  return spawnSync(process.execPath, [MAIN, ...args], {
    env: {
      ...process.env,
      ...TEST_AUTH_ENV,
      LOOPGUARD_DATA_DIR: dataDir,
      BILLING_PORT: "0",
      BILLING_METRICS_PORT: "0",
      ...env,
    },
    encoding: "utf8",
    timeout: 15_000,
  });
}

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
  const result = run({ BILLING_STORE: store });
  expect(result.status).toBe(2);
  expect(result.stderr).toMatch(message);
  expect(result.stderr.trim().split("\n")).toHaveLength(1);
  expect(result.stderr + result.stdout).not.toContain("hunter2");
  expect(result.stdout).not.toContain('"msg":"serving"');
});

describe("BILLING_STORE_FILE", () => {
  it("reads the store URL from the file it names, as a mounted Secret holds it (a newline after it)", () => {
    const store = join(dataDir, "from-file.db");
    const file = join(dataDir, "dsn");
    writeFileSync(file, `sqlite:${store}\n`, { mode: 0o600 });
    const migrated = run({ BILLING_STORE_FILE: file }, ["migrate"]);
    expect(migrated.stderr).toBe("");
    expect(migrated.status).toBe(0);
    expect(existsSync(store)).toBe(true);
  });

  it.each([
    [
      "names a file that is not there",
      () => ({ BILLING_STORE_FILE: join(dataDir, "missing") }),
      /^billing: configuration error: BILLING_STORE_FILE: cannot read .*missing \(ENOENT\)\n$/,
    ],
    [
      "names an empty file",
      () => ({ BILLING_STORE_FILE: secretFile("\n") }),
      /^billing: configuration error: BILLING_STORE_FILE: .* is empty\n$/,
    ],
    [
      "holds a URL no store can be made of",
      () => ({ BILLING_STORE_FILE: secretFile("postgres://billing:hunter2@db:port/billing\n") }),
      /^billing: configuration error: BILLING_STORE_FILE is not a valid PostgreSQL URL/,
    ],
    [
      "is set beside BILLING_STORE",
      () => ({ BILLING_STORE_FILE: secretFile("sqlite:/tmp/x.db"), BILLING_STORE: "sqlite:/tmp/y.db" }),
      /^billing: configuration error: set BILLING_STORE or BILLING_STORE_FILE, not both\n$/,
    ],
  ])("exits 2, echoing nothing of the file, when it %s", (_, env, message) => {
    const result = run(env());
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(result.stderr + result.stdout).not.toContain("hunter2");
    expect(result.stdout).not.toContain('"msg":"serving"');
  });
});

let secrets = 0;
function secretFile(text: string): string {
  const file = join(dataDir, `secret-${++secrets}`);
  writeFileSync(file, text, { mode: 0o600 });
  return file;
}
