// Finds Prometheus's binaries (Debian package `prometheus`), so tests that need them can skip
// with a reason on machines without it instead of failing; runs a unit test file of promtool's.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { toYaml } from "../src/manifests/yaml.js";

export function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter).filter(Boolean), "/usr/bin"];
  return dirs.map((dir) => join(dir, name)).find((path) => existsSync(path));
}

/** `promtool test rules` on one test file made of `tests`: what promtool printed, and its exit status. */
export function promtoolTestRules(promtool: string, tests: object): { output: string; status: number | null } {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-promtool-"));
  try {
    writeFileSync(join(dir, "test.yml"), toYaml(tests));
    const result = spawnSync(promtool, ["test", "rules", join(dir, "test.yml")], { encoding: "utf8", timeout: 60_000 });
    return { output: `${result.stdout}${result.stderr}`, status: result.status };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
