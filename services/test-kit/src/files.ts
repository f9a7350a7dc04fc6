// What a test checks of a SQLite database's files on disk: who may read them.
import { statSync } from "node:fs";
import { join } from "node:path";

/** Permission bits of `folder`, then of the database `name` in it and its WAL and shared-memory files. */
export function sqliteModes(folder: string, name: string): number[] {
  return [folder, ...[name, `${name}-wal`, `${name}-shm`].map((file) => join(folder, file))].map(
    (path) => statSync(path).mode & 0o777,
  );
}
