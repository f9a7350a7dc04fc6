// `pnpm images` refuses what it cannot build with one line and an exit code, before it asks Docker
// for anything or waits for another build's turn.
import { join } from "node:path";
import { repoRoot as root } from "@loopguard/test-kit";
import { describe, expect, it } from "vitest";
import { type Run, runProcess } from "./run-process.js";

function images(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return runProcess(process.execPath, [join(root, "deploy", "dist", "local", "images-main.js"), ...args], {
    timeoutMs: 20_000,
    env: { ...process.env, ...env },
  });
}

describe("pnpm images on bad input", () => {
  it.each([
    ["lots", 'images: LOOPGUARD_IMAGE_BUILD_CPUS must be a number of cores from 0.01 to 1024, got "lots"\n'],
    ["0", 'images: LOOPGUARD_IMAGE_BUILD_CPUS must be a number of cores from 0.01 to 1024, got "0"\n'],
  ])("LOOPGUARD_IMAGE_BUILD_CPUS=%s: exit 2 with one line naming the setting", async (value, line) => {
    const run = await images([], { LOOPGUARD_IMAGE_BUILD_CPUS: value });
    expect(run).toEqual({ code: 2, stdout: "", stderr: line });
  });

  it("an unknown image: exit 2 with the images there are", async () => {
    const run = await images(["billling"]);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(/^images: unknown image billling \(images: [a-z-]+(, [a-z-]+)*\)\n$/);
    expect(run.stderr).toContain("billing");
  });
});
