import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { describeLeftovers, newEntries, recordEntries } from "./temp-entries.js";

let root: string;
let temp: string;
let record: string;
beforeEach(() => {
  // Its own folder for a temp folder, named unlike loopguard-*, so the run's own check never sees it.
  root = mkdtempSync(join(tmpdir(), "temp-entries-"));
  temp = join(root, "tmp");
  mkdirSync(temp);
  record = join(root, "before.json");
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe("the temp folder's leftovers", () => {
  it("are the loopguard-* entries made after the record, folders and files alike", () => {
    mkdirSync(join(temp, "loopguard-old-abc123"));
    mkdirSync(join(temp, "someone-else-xyz"));
    recordEntries(temp, record);
    mkdirSync(join(temp, "loopguard-test-keys-Q1w2E3"));
    writeFileSync(join(temp, "loopguard-port-50051.pid"), "1");
    mkdirSync(join(temp, "other-tool-Z9"));
    expect(newEntries(temp, record)).toEqual(["loopguard-port-50051.pid", "loopguard-test-keys-Q1w2E3"]);
  });

  it("leave out the entries named with the id of a process still running, not those of one that ended", () => {
    recordEntries(temp, record);
    const ended = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout.toString();
    mkdirSync(join(temp, `loopguard-test-keys-${process.pid}-Ab12Cd`));
    mkdirSync(join(temp, `loopguard-test-keys-${ended}-Ef34Gh`));
    expect(newEntries(temp, record)).toEqual([`loopguard-test-keys-${ended}-Ef34Gh`]);
  });

  it("are none when the run removed what it made", () => {
    recordEntries(temp, record);
    mkdirSync(join(temp, "loopguard-orch-a1"));
    rmSync(join(temp, "loopguard-orch-a1"), { recursive: true });
    expect(newEntries(temp, record)).toEqual([]);
  });

  it("are described by count per prefix, then by name up to 20", () => {
    const names = [
      ...Array.from({ length: 22 }, (_, i) => `loopguard-test-keys-k${i}`),
      "loopguard-orch-o1",
      "loopguard-orch-o2",
      "loopguard-supervisor-s1",
    ];
    const message = describeLeftovers(names);
    expect(message).toContain("left 25 loopguard-* entries");
    expect(message).toContain("22 loopguard-test-keys-*, 2 loopguard-orch-*, 1 loopguard-supervisor-*");
    expect(message).toContain("loopguard-test-keys-k0\n");
    expect(message).not.toContain("loopguard-orch-o1");
    expect(message).toContain("… and 5 more");
    expect(describeLeftovers(["loopguard-test-keys-4242-Ab12Cd", "loopguard-test-keys-4343-Ef34Gh"])).toContain(
      "(2 loopguard-test-keys-*)",
    );
  });
});
