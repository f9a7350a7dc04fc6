import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { discoverServices } from "./manifest.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function workspace(manifests: Record<string, unknown>): string {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-services-"));
  dirs.push(dir);
  for (const [name, manifest] of Object.entries(manifests)) {
    mkdirSync(join(dir, name));
    writeFileSync(join(dir, name, "package.json"), JSON.stringify(manifest));
  }
  return dir;
}

const geo = { kind: "tool", entry: "dist/main.js", port: 50064, metricsPort: 9464, envPrefix: "GEO" };

describe("discoverServices", () => {
  it("reads kind, ports, store and secret files, with defaults for what a manifest leaves out", () => {
    const dir = workspace({
      geo: {
        loopguard: {
          ...geo,
          stateful: true,
          secretFiles: { GEO_LICENSE_FILE: "loopguard-geo-license/license" },
          schemaSecretFiles: ["GEO_LICENSE_FILE"],
        },
      },
      maps: { loopguard: { ...geo, envPrefix: "MAPS" } },
      "sdk-only": { name: "@loopguard/sdk-only" },
    });
    expect(discoverServices(dir)).toMatchObject([
      {
        name: "geo",
        kind: "tool",
        port: 50064,
        metricsPortEnv: "GEO_METRICS_PORT",
        stateful: true,
        secretFiles: { GEO_LICENSE_FILE: "loopguard-geo-license/license" },
        schemaSecretFiles: ["GEO_LICENSE_FILE"],
      },
      { name: "maps", kind: "tool", stateful: false, secretFiles: {}, schemaSecretFiles: [] },
    ]);
  });

  it.each([
    [{ ...geo, kind: "worker" }, /kind must be one of tool, orchestrator/],
    [{ ...geo, port: undefined }, /needs entry, port, metricsPort and envPrefix/],
    [{ ...geo, stateful: "yes" }, /stateful must be true or false/],
    [
      { ...geo, secretFiles: { GEO_LICENSE_FILE: "no-key" } },
      /secretFiles must map VARIABLE names to "secret-name\/key"/,
    ],
    [{ ...geo, schemaSecretFiles: ["GEO_LICENSE_FILE"] }, /schemaSecretFiles must list variables of its secretFiles/],
  ])("refuses a manifest %j, naming the file", (loopguard, message) => {
    const dir = workspace({ geo: { loopguard } });
    expect(() => discoverServices(dir)).toThrow(message);
    expect(() => discoverServices(dir)).toThrow(join(dir, "geo", "package.json"));
  });
});
