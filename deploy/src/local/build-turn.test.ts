import { join } from "node:path";
import { type TempDir, tempDir } from "@loopguard/test-kit";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { takeBuildTurn } from "./build-turn.js";

describe("one image build at a time", () => {
  let dir: TempDir;
  beforeEach(() => {
    dir = tempDir("build-turn");
  });
  afterEach(() => dir.remove());

  it("makes a second build wait, saying so, until the first lets go", async () => {
    const path = join(dir.dir, "images");
    const said: string[] = [];
    const releaseFirst = await takeBuildTurn((line) => said.push(line), { path });
    expect(said).toEqual([]);
    let secondStarted = false;
    const second = takeBuildTurn((line) => said.push(line), { path }).then((release) => {
      secondStarted = true;
      return release;
    });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(secondStarted).toBe(false);
    expect(said).toEqual(["another image build is running on this machine: waiting for it to end"]);
    await releaseFirst();
    const releaseSecond = await second;
    expect(secondStarted).toBe(true);
    await releaseSecond();
  });

  it("gives up after its wait, and the build in progress keeps its turn", async () => {
    const path = join(dir.dir, "images");
    const release = await takeBuildTurn(() => undefined, { path });
    const started = Date.now();
    await expect(takeBuildTurn(() => undefined, { path, waitS: 1 })).rejects.toMatchObject({ code: "ELOCKED" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    await release();
    await (await takeBuildTurn(() => undefined, { path }))();
  });
});
