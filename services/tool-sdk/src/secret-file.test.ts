import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "@loopguard/test-kit";
import { afterAll, describe, expect, it } from "vitest";
import { newKeyPair } from "./auth.js";
import { ensureLocalKeys, localKeyPaths, personKey } from "./local-keys.js";
import { FileWriteError, writeFileAtomically } from "./secret-file.js";

// One folder for the file, removed once its tests are done, passed or failed; a folder in it per test.
const temp = tempDir("secret-file");
afterAll(temp.remove);
const fresh = () => mkdtempSync(join(temp.dir, "test-"));

describe("writeFileAtomically", () => {
  it("replaces a file whole with exactly the mode asked for, even over a 0644 one", () => {
    const dir = fresh();
    writeFileSync(join(dir, "k.json"), "old");
    chmodSync(join(dir, "k.json"), 0o644);
    writeFileAtomically(join(dir, "k.json"), "new", 0o600);
    expect(readFileSync(join(dir, "k.json"), "utf8")).toBe("new");
    expect(statSync(join(dir, "k.json")).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(["k.json"]);
  });

  it("without replace refuses an existing file and leaves it as it was", () => {
    const dir = fresh();
    writeFileSync(join(dir, "k.jwk"), "mine");
    expect(() => writeFileAtomically(join(dir, "k.jwk"), "other", 0o600, false)).toThrow(
      new FileWriteError(`cannot write ${join(dir, "k.jwk")}: file already exists (EEXIST)`),
    );
    expect(readFileSync(join(dir, "k.jwk"), "utf8")).toBe("mine");
    expect(readdirSync(dir)).toEqual(["k.jwk"]);
  });

  it("onto a folder: an error naming the path and why, and no temporary file left", () => {
    const dir = fresh();
    mkdirSync(join(dir, "out"));
    expect(() => writeFileAtomically(join(dir, "out"), "secret", 0o600)).toThrow(
      new FileWriteError(`cannot write ${join(dir, "out")}: illegal operation on a directory (EISDIR)`),
    );
    expect(readdirSync(dir)).toEqual(["out"]);
  });
});

describe("ensureLocalKeys", () => {
  it("writes the call secrets 0600 even when a stale 0644 call-secrets.json.tmp is there", () => {
    const dir = fresh();
    const paths = localKeyPaths(dir);
    mkdirSync(paths.dir, { recursive: true });
    writeFileSync(`${paths.callSecrets}.tmp`, "");
    chmodSync(`${paths.callSecrets}.tmp`, 0o644);
    ensureLocalKeys(dir);
    expect(statSync(paths.callSecrets).mode & 0o777).toBe(0o600);
  });

  it("refuses a person's key file that is JSON but no key, naming it, instead of publishing a broken key", () => {
    const dir = fresh();
    const paths = ensureLocalKeys(dir);
    const approver = join(paths.dir, "approver.jwk");
    for (const content of ["{}", '{"kid":"local-approver-x"}', "[]", '"x"']) {
      writeFileSync(approver, content);
      expect(() => ensureLocalKeys(dir)).toThrow(
        new RegExp(
          `^${approver.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is not a key file that can be read \\(.+\\); move it away`,
        ),
      );
    }
  });

  it("refuses a key whose x is not the public half of its d, and a person key that is not the one the JWKS publishes", () => {
    const dir = fresh();
    const paths = ensureLocalKeys(dir);
    const read = (name: string) =>
      JSON.parse(readFileSync(join(paths.dir, `${name}.jwk`), "utf8")) as Record<string, string>;
    const alice = read("approver");
    const mixed = { ...alice, d: read("requester").d };
    writeFileSync(join(dir, "mixed.jwk"), JSON.stringify(mixed));
    expect(() => personKey({ LOOPGUARD_DATA_DIR: dir, LOOPGUARD_SIGNING_KEY_FILE: join(dir, "mixed.jwk") })).toThrow(
      /x is not the public half of its d/,
    );
    // A whole other pair under approver's kid: sound as a key, not the one published.
    const other = newKeyPair(alice.kid!).privateJwk;
    writeFileSync(join(dir, "other.jwk"), JSON.stringify(other));
    expect(() => personKey({ LOOPGUARD_DATA_DIR: dir, LOOPGUARD_SIGNING_KEY_FILE: join(dir, "other.jwk") })).toThrow(
      `the private key of ${alice.kid} is not the key the JWKS publishes as ${alice.kid}: its tokens would not verify`,
    );
  });
});
