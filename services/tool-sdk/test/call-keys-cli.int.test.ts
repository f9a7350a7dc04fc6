// The real `pnpm call-keys` command: a deployment's call secrets and each tool's key, through a
// rotation, checked by what the orchestrator and the tool do with the files.
import { execFile } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "@loopguard/test-kit";
import { afterAll, describe, expect, it } from "vitest";
import { CallCredentials, CallKeyChecker, readCallKeys } from "../src/call-keys.js";

const CLI = fileURLToPath(new URL("../dist/cli/call-keys.js", import.meta.url));
const { dir, remove } = tempDir("call-keys-cli");
afterAll(remove);

function run(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) =>
    execFile(process.execPath, [CLI, ...args], { cwd: dir, timeout: 30_000 }, (error, stdout, stderr) =>
      done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
}

const json = (name: string) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const minter = () => new CallCredentials(readCallKeys(json("call-secrets.json")));
const checker = (tool: string, file = `call-keys-${tool}.json`) =>
  new CallKeyChecker(readCallKeys(json(file), tool), tool, file);
const claims = (audience: string) => ({
  subject: "session:s1",
  audience,
  scopes: [],
  expiresAt: Date.now() + 60_000,
});

describe("pnpm call-keys", () => {
  it("makes the secrets and each tool's key (0600), and rotates without a credential refused on the way", async () => {
    expect((await run("new", "--kid", "call-1")).code).toBe(0);
    expect((await run("derive", "--tool", "billing")).code).toBe(0);
    expect((await run("derive", "--tool", "risk")).code).toBe(0);
    for (const file of ["call-secrets.json", "call-keys-billing.json"])
      expect(statSync(join(dir, file)).mode & 0o777).toBe(0o600);
    const first = minter().mint(claims("billing"));
    expect(checker("billing").check(first, Date.now())?.caller.keyId).toBe("call-1");
    expect(() => checker("risk").check(first, Date.now())).toThrow(/does not verify with risk's call key/);

    // A new secret is held by the tools before anything mints with it.
    expect((await run("new", "--kid", "call-2")).code).toBe(0);
    expect(
      JSON.parse(Buffer.from(minter().mint(claims("billing")).split(".")[0]!, "base64url").toString()),
    ).toMatchObject({ kid: "call-1" });
    await run("derive", "--tool", "billing");
    expect((await run("activate", "--kid", "call-2")).code).toBe(0);
    const second = minter().mint(claims("billing"));
    expect(checker("billing").check(second, Date.now())?.caller.keyId).toBe("call-2");
    expect(checker("billing").check(first, Date.now())?.caller.keyId).toBe("call-1");

    const refused = await run("remove", "--kid", "call-2");
    expect(refused).toMatchObject({
      code: 2,
      stderr: 'call-keys: "call-2" is the secret minting now; activate its successor first\n',
    });
    expect((await run("remove", "--kid", "call-1")).code).toBe(0);
    await run("derive", "--tool", "billing");
    expect(() => checker("billing").check(first, Date.now())).toThrow(/call key call-1 is not one held by billing/);
  });

  it("refuses a tool the contracts do not name, in one line, exit 2", async () => {
    const r = await run("derive", "--tool", "bill");
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("call-keys: --tool bill is not a tool of the contracts (kb-search, billing, risk)\n");
  });
});
