// What a test run leaves in the OS temp folder: background.ts records the loopguard-* entries as the
// run starts, workspace-checks.int.test.ts lists those present at its end that were not there then.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";

const PREFIX = "loopguard-";
/** How many leftover names a failure message lists; the count by prefix covers the rest. */
const NAMED = 20;

/** The loopguard-* entries of `dir` (os.tmpdir() in the check), sorted. */
export function loopguardEntries(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => name.startsWith(PREFIX))
    .sort();
}

/** Records `dir`'s loopguard-* entries into `file`. */
export function recordEntries(dir: string, file: string): void {
  writeFileSync(file, JSON.stringify(loopguardEntries(dir)));
}

/** The process id an entry is named with (`loopguard-<what>-<pid>-<random>`), if any. */
const ownerOf = (name: string): number | undefined => {
  const pid = /-(\d+)-[A-Za-z0-9]+$/.exec(name)?.[1];
  return pid === undefined ? undefined : Number(pid);
};

/** Whether process `pid` is still running: its entries are in use, not left behind yet. */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The loopguard-* entries of `dir` that `file` (written by recordEntries) does not list, but those of a process still running. */
export function newEntries(dir: string, file: string): string[] {
  const before = new Set(JSON.parse(readFileSync(file, "utf8")) as string[]);
  return loopguardEntries(dir).filter((name) => {
    if (before.has(name)) return false;
    const owner = ownerOf(name);
    return owner === undefined || !running(owner);
  });
}

/** A name without mkdtemp's random tail, the process id before it, or a pid file's number: loopguard-test-keys-4242-Ab12Cd → loopguard-test-keys-*. */
const prefixOf = (name: string): string => name.replace(/(-\d+)?-[^-]*$/, "-*");

/** Leftover entries as a failure message: the count by prefix, then the first names. */
export function describeLeftovers(names: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const name of names) counts.set(prefixOf(name), (counts.get(prefixOf(name)) ?? 0) + 1);
  const byPrefix = [...counts].sort(([, a], [, b]) => b - a).map(([prefix, n]) => `${n} ${prefix}`);
  const more = names.length > NAMED ? `\n… and ${names.length - NAMED} more` : "";
  return (
    `the run left ${names.length} loopguard-* entries in the temp folder (${byPrefix.join(", ")}):\n` +
    names.slice(0, NAMED).join("\n") +
    more
  );
}
