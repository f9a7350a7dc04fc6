// docs/kubernetes.md lists what a cluster needs installed, with versions: every custom kind the
// manifests may contain must be in that table, so a new one cannot ship without saying what runs it.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { CUSTOM_KINDS } from "../src/manifests/renderings.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const docs = readFileSync(join(root, "docs", "kubernetes.md"), "utf8");
const section = docs.slice(
  docs.indexOf("## Prerequisites"),
  docs.indexOf("\n## ", docs.indexOf("## Prerequisites") + 1),
);
const rows = section
  .split("\n")
  .filter((line) => line.startsWith("| ") && !line.startsWith("| What") && !line.startsWith("|---"));

describe("docs/kubernetes.md prerequisites", () => {
  it.each(CUSTOM_KINDS)("%s: its API group and kind are in a row that names a version", (apiVersionKind) => {
    const kind = apiVersionKind.slice(apiVersionKind.lastIndexOf("/") + 1);
    const apiVersion = apiVersionKind.slice(0, apiVersionKind.lastIndexOf("/"));
    const row = rows.find((r) => r.includes(`\`${apiVersion}\``) && new RegExp(`\\b${kind}\\b`).test(r));
    expect(row, `${apiVersionKind} is not in the prerequisites table`).toBeDefined();
    expect(row!.split("|").at(-2)).toMatch(/\d+\.\d+/);
  });

  it("names metrics-server, without which the HPAs never scale", () => {
    expect(rows.some((r) => r.includes("metrics-server") && r.includes("high-availability"))).toBe(true);
  });
});
