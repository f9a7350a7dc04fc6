import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { freePort, kill, repoRoot, spawnService, tempDir } from "./processes.js";

/** A stand-in service: logs its "serving" line (with a variable of its environment), then waits. */
function fakeService(dir: string, exitFirst = false): string {
  const entry = join(dir, "main.mjs");
  const body = exitFirst
    ? "process.exit(3);"
    : `console.log("not json");
console.log(JSON.stringify({ msg: "serving", address: "127.0.0.1:" + process.env.FAKE_PORT, metrics_port: 9 }));
setInterval(() => undefined, 60_000);`;
  writeFileSync(entry, body);
  return entry;
}

describe("spawnService", () => {
  it("resolves with the address of the serving line, and kill ends the process", async () => {
    const folder = tempDir("test-kit");
    try {
      const proc = await spawnService(fakeService(folder.dir), { FAKE_PORT: "4321" });
      expect(proc.address).toBe("127.0.0.1:4321");
      expect(proc.metricsPort).toBe(9);
      expect(proc.lines).toHaveLength(1);
      expect(await kill(proc)).toBe("SIGKILL");
      expect(await kill(proc)).toBe("SIGKILL");
    } finally {
      folder.remove();
    }
  });

  it("rejects when the process exits before serving", async () => {
    const folder = tempDir("test-kit");
    try {
      await expect(spawnService(fakeService(folder.dir, true), {})).rejects.toThrow(/exited \(3\) before serving/);
    } finally {
      folder.remove();
    }
  });
});

describe("freePort", () => {
  it("gives a port a server can listen on", async () => {
    const port = await freePort();
    const server = createServer();
    await new Promise<void>((listening) => server.listen(port, "127.0.0.1", listening));
    await new Promise((closed) => server.close(closed));
  });

  it("hands out each port once, below the kernel's range for outgoing connections' local ports", async () => {
    const ephemeralLow = Number.parseInt(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8"), 10);
    const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
    expect(new Set(ports).size).toBe(50);
    expect(ports.filter((p) => p >= ephemeralLow)).toEqual([]);
  });
});

describe("tempDir and repoRoot", () => {
  it("makes a folder that remove() deletes", () => {
    const folder = tempDir("test-kit");
    expect(existsSync(folder.dir)).toBe(true);
    folder.remove();
    expect(existsSync(folder.dir)).toBe(false);
  });

  it("finds the workspace's root", () => {
    expect(existsSync(join(repoRoot, "pnpm-workspace.yaml"))).toBe(true);
  });
});
