// The source tree's shape, held by a test so it does not drift back: no import circles in any
// package, no source file over 300 lines at Biome's width of 120, the orchestrator in its folders.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import madge from "madge";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const packages = [
  ...readdirSync(join(root, "services")).map((name) => join("services", name)),
  "deploy",
  "test",
].filter((dir) => statSync(join(root, dir, "src"), { throwIfNoEntry: false })?.isDirectory());

/** Source files a person maintains: tests, type declarations and generated code aside. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "generated" || entry.name === "gen" ? [] : sourceFiles(path);
    return /\.ts$/.test(entry.name) && !/\.(test|d)\.ts$/.test(entry.name) ? [path] : [];
  });
}

describe("source layout", () => {
  it.each(packages)("%s/src has no import circles", async (pkg) => {
    const graph = await madge(join(root, pkg, "src"), {
      fileExtensions: ["ts"],
      tsConfig: join(root, pkg, "tsconfig.json"),
    });
    expect(graph.circular()).toEqual([]);
  });

  it("keeps every source file at or under 300 lines", () => {
    const long = packages
      .flatMap((pkg) => sourceFiles(join(root, pkg, "src")))
      .map((file) => ({ file: relative(root, file), lines: readFileSync(file, "utf8").split("\n").length - 1 }))
      .filter(({ lines }) => lines > 300);
    expect(long).toEqual([]);
  });

  it("keeps the orchestrator's src root to its wiring; everything else lives in a folder", () => {
    const rootFiles = readdirSync(join(root, "services/orchestrator/src")).filter((name) => name.endsWith(".ts"));
    expect(rootFiles.filter((name) => !name.endsWith(".test.ts")).sort()).toEqual([
      "config.ts",
      "index.ts",
      "main.ts",
      "server.ts",
      "tool-registry.ts",
    ]);
  });
});
