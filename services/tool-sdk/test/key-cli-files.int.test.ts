// The real `pnpm keys` and `pnpm call-keys` commands given a file they cannot write or read: one line
// naming the problem, exit 2, no stack trace, no half-written or orphan file, secrets 0600.
import { execFile } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "@loopguard/test-kit";
import { afterAll, describe, expect, it } from "vitest";

const CALL_KEYS = fileURLToPath(new URL("../dist/cli/call-keys.js", import.meta.url));
const KEYS = fileURLToPath(new URL("../dist/cli/keys.js", import.meta.url));

function run(cli: string, cwd: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) =>
    execFile(process.execPath, [cli, ...args], { cwd, timeout: 30_000 }, (error, stdout, stderr) =>
      done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
}
// One folder for the file, removed once its tests are done, passed or failed; a folder in it per test.
const temp = tempDir("key-cli-files");
afterAll(temp.remove);
const fresh = () => mkdtempSync(join(temp.dir, "test-"));
const newKey = (dir: string, kid: string, ...files: string[]) =>
  run(KEYS, dir, "new", "--kid", kid, "--role", "person", "--subject", kid, "--scope", "sessions:read", ...files);

async function withSecrets(): Promise<string> {
  const dir = fresh();
  expect((await run(CALL_KEYS, dir, "new", "--kid", "c1")).code).toBe(0);
  return dir;
}

describe("pnpm call-keys writing files", () => {
  it("derive --out into a folder that does not exist: one line naming the file, exit 2", async () => {
    const dir = await withSecrets();
    const r = await run(CALL_KEYS, dir, "derive", "--tool", "billing", "--out", "no/such/dir/k.json");
    expect(r).toMatchObject({
      code: 2,
      stderr: "call-keys: cannot write no/such/dir/k.json: no such file or directory (ENOENT)\n",
    });
  });

  it("derive --out naming a folder: one line, and no temporary file holding the key left behind", async () => {
    const dir = await withSecrets();
    mkdirSync(join(dir, "out"));
    const r = await run(CALL_KEYS, dir, "derive", "--tool", "billing", "--out", "out");
    expect(r).toMatchObject({
      code: 2,
      stderr: "call-keys: cannot write out: illegal operation on a directory (EISDIR)\n",
    });
    expect(readdirSync(dir).sort()).toEqual(["call-secrets.json", "out"]);
    expect(readdirSync(join(dir, "out"))).toEqual([]);
  });

  it("new writes the secrets 0600 past a stale 0644 call-secrets.json.tmp, and never follows a planted symlink", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "call-secrets.json.tmp"), "");
    chmodSync(join(dir, "call-secrets.json.tmp"), 0o644);
    writeFileSync(join(dir, "elsewhere"), "");
    symlinkSync(join(dir, "elsewhere"), join(dir, ".call-secrets.json.tmp"));
    expect((await run(CALL_KEYS, dir, "new", "--kid", "c1")).code).toBe(0);
    expect(statSync(join(dir, "call-secrets.json")).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, "elsewhere")).size).toBe(0);
  });
});

describe("pnpm keys writing and reading files", () => {
  it("revoke on a JWKS file holding `null`: one line saying it is not a JWKS", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "jwks.json"), "null\n");
    expect(await run(KEYS, dir, "revoke", "--kid", "k1")).toMatchObject({
      code: 2,
      stderr: 'keys: jwks.json is not a JWKS: a JSON object with "keys" expected\n',
    });
  });

  it("new whose JWKS cannot be written keeps no private key, so a re-run once fixed succeeds", async () => {
    const dir = fresh();
    const r = await newKey(dir, "alice-1", "--private-out", "alice.jwk", "--jwks", "missing/jwks.json");
    expect(r).toMatchObject({
      code: 2,
      stderr: "keys: cannot write missing/jwks.json: no such file or directory (ENOENT) (alice.jwk not kept)\n",
    });
    expect(readdirSync(dir)).toEqual([]);
    mkdirSync(join(dir, "missing"));
    expect((await newKey(dir, "alice-1", "--private-out", "alice.jwk", "--jwks", "missing/jwks.json")).code).toBe(0);
    expect(statSync(join(dir, "alice.jwk")).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, "missing", "jwks.json")).mode & 0o777).toBe(0o644);
  });

  it("new with --private-out in a folder that does not exist: one line, and the JWKS untouched", async () => {
    const dir = fresh();
    expect(await newKey(dir, "bob-1", "--private-out", "nope/bob.jwk")).toMatchObject({
      code: 2,
      stderr: "keys: cannot write nope/bob.jwk: no such file or directory (ENOENT)\n",
    });
    expect(existsSync(join(dir, "jwks.json"))).toBe(false);
  });
});
