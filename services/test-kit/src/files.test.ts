import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { sqliteModes } from "./files.js";
import { tempDir } from "./processes.js";

const temp = tempDir("files");
afterAll(() => temp.remove());

it("reads the folder's mode, then the database's, its WAL's and its shared memory's", () => {
  const folder = join(temp.dir, "data");
  mkdirSync(folder, { mode: 0o700 });
  const modes = { "app.db": 0o600, "app.db-wal": 0o640, "app.db-shm": 0o644 };
  for (const [name, mode] of Object.entries(modes)) {
    writeFileSync(join(folder, name), "");
    chmodSync(join(folder, name), mode);
  }
  expect(sqliteModes(folder, "app.db")).toEqual([0o700, 0o600, 0o640, 0o644]);
});

it("throws when a file is missing", () => {
  expect(() => sqliteModes(temp.dir, "missing.db")).toThrow(/ENOENT/);
});
