// Finds Prometheus's binaries (Debian package `prometheus`), so tests that need them can skip
// with a reason on machines without it instead of failing.
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";

export function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter).filter(Boolean), "/usr/bin"];
  return dirs.map((dir) => join(dir, name)).find((path) => existsSync(path));
}
