import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { exitCodeOf, UsageError } from "./cli.js";

// The built module (`pnpm build` first): runCli exits, so it runs in a child process.
const cli = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "cli.js");

function run(body: string): { status: number | null; stderr: string } {
  const script = `import { runCli, UsageError } from ${JSON.stringify(cli)};\n${body}`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
  });
  return { status: child.status, stderr: child.stderr };
}

describe("exitCodeOf", () => {
  it("is 2 for a wrong argument", () => {
    expect(exitCodeOf(new UsageError("name a tool"))).toBe(2);
  });

  it("is 1 for anything else", () => {
    expect(exitCodeOf(new Error("docker is not running"))).toBe(1);
    expect(exitCodeOf("a string")).toBe(1);
  });
});

describe("runCli", () => {
  it("exits with the code main returns", () => {
    expect(run("runCli('t', async () => 3);").status).toBe(3);
    expect(run("runCli('t', () => 0);").status).toBe(0);
  });

  it("exits 2 with one line naming the command on a UsageError", () => {
    const child = run("runCli('images', () => { throw new UsageError('--tag takes a tag'); });");
    expect(child.status).toBe(2);
    expect(child.stderr).toBe("images: --tag takes a tag\n");
  });

  it("exits 1 with the described line on any other error", () => {
    const child = run("runCli('drill', async () => { throw new Error('a\\nb'); }, (e) => e.message.split('\\n')[0]);");
    expect(child.status).toBe(1);
    expect(child.stderr).toBe("drill: a\n");
  });
});
