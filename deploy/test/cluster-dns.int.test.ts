// The cluster DNS of `pnpm containers`, over real UDP and TCP on loopback: a headless Service's
// names answer every replica's address, follow the records file as it changes, and unknown names
// are NXDOMAIN (so resolvers walk their search domains).
import { createSocket } from "node:dgram";
import { promises as dns } from "node:dns";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DnsServer } from "dns2";
import { startClusterDns } from "../src/local/cluster-dns.js";

let server: DnsServer;
let dir: string;
let resolver: dns.Resolver;
const file = () => join(dir, "records.json");

function freeUdpPort(): Promise<number> {
  const socket = createSocket("udp4");
  return new Promise((resolve) =>
    socket.bind(0, "127.0.0.1", () => {
      const { port } = socket.address();
      socket.close(() => resolve(port));
    }),
  );
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "loopguard-dns-"));
  writeFileSync(file(), JSON.stringify({ "kb-search": ["127.0.0.10", "127.0.0.11"], orchestrator: ["127.0.0.1"] }));
  const port = await freeUdpPort();
  server = await startClusterDns({ host: "127.0.0.1", port, recordsFile: file() });
  resolver = new dns.Resolver({ timeout: 1000, tries: 1 });
  resolver.setServers([`127.0.0.1:${port}`]);
});

afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("cluster DNS", () => {
  it("answers a service's full and short names with every replica's address", async () => {
    for (const name of [
      "kb-search.loopguard.svc.cluster.local",
      "kb-search.loopguard.svc",
      "kb-search.loopguard",
      "kb-search",
    ]) {
      expect((await resolver.resolve4(name)).sort()).toEqual(["127.0.0.10", "127.0.0.11"]);
    }
  });

  it("answers AAAA of a known name with no address (not an error), and unknown names with NXDOMAIN", async () => {
    await expect(resolver.resolve6("kb-search.loopguard.svc.cluster.local")).rejects.toMatchObject({ code: "ENODATA" });
    await expect(resolver.resolve4("billing.loopguard.svc.cluster.local")).rejects.toMatchObject({ code: "ENOTFOUND" });
    await expect(resolver.resolve4("kb-search.other.svc.cluster.local")).rejects.toMatchObject({ code: "ENOTFOUND" });
  });

  it("follows the records file as replicas come and go", async () => {
    writeFileSync(
      file(),
      JSON.stringify({ "kb-search": ["127.0.0.10", "127.0.0.11", "127.0.0.12"], billing: ["127.0.0.13"] }),
    );
    expect((await resolver.resolve4("kb-search.loopguard.svc.cluster.local")).sort()).toEqual([
      "127.0.0.10",
      "127.0.0.11",
      "127.0.0.12",
    ]);
    expect(await resolver.resolve4("billing")).toEqual(["127.0.0.13"]);
    await expect(resolver.resolve4("orchestrator")).rejects.toMatchObject({ code: "ENOTFOUND" });
  });
});
