// Replica discovery through a real DNS server started here: a `dns:` target resolves a name to
// every replica's address, calls are balanced over all of them, and a name that gains addresses
// is picked up once the servers' max connection age makes clients resolve again.
import { createSocket } from "node:dgram";
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { createServer, Packet, type DnsServer } from "dns2";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it, vi } from "vitest";
import { toolClient } from "../src/client/tool-client.js";
import { startTestTool, testToken } from "../testing/index.js";

// grpc-js honours a DNS server named in the target's authority only with its c-ares resolver,
// chosen when grpc-js loads (getaddrinfo reads /etc/resolv.conf and cannot be pointed elsewhere).
vi.hoisted(() => {
  process.env.GRPC_NODE_USE_ALTERNATIVE_RESOLVER = "true";
});

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const NAME = "kb-search.loopguard.svc.cluster.local";
// Loopback addresses of this file's own "pods", away from the ones other tests and tools use.
const base = 100 + Math.floor(Math.random() * 100);
const podAddresses = [1, 2, 3].map((n) => `127.${base}.${Math.floor(Math.random() * 250)}.${n}`);

/** An authoritative DNS server on loopback answering A queries for NAME from `records`. */
async function startDns(records: { addresses: string[] }): Promise<string> {
  const server: DnsServer = createServer({
    udp: true,
    handle: (request, send) => {
      const response = Packet.createResponseFromRequest(request);
      const question = request.questions[0];
      if (question?.type === Packet.TYPE.A && question.name.toLowerCase() === NAME) {
        for (const address of records.addresses) {
          response.answers.push(
            Packet.createResourceFromQuestion(question, {
              type: Packet.TYPE.A,
              class: Packet.CLASS.IN,
              ttl: 1,
              address,
            }),
          );
        }
      }
      void send(response);
    },
  });
  const port = await freeUdpPort();
  await server.listen({ udp: { port, address: "127.0.0.1" } });
  cleanups.push(() => server.close());
  return `127.0.0.1:${port}`;
}

function freeUdpPort(): Promise<number> {
  const socket = createSocket("udp4");
  return new Promise((resolve) =>
    socket.bind(0, "127.0.0.1", () => {
      const { port } = socket.address();
      socket.close(() => resolve(port));
    }),
  );
}

/** kb-search replicas on the pod addresses, all on one port as a headless Service's pods are. */
async function startReplicas(options: { maxConnectionAgeMs?: number; maxConnectionAgeGraceMs?: number } = {}) {
  const calls = podAddresses.map(() => 0);
  let port = 0;
  const replicas = [];
  for (const [index, host] of podAddresses.entries()) {
    const replica = await startTestTool(
      {
        service: KbSearchService,
        handlers: {
          search: async () => {
            calls[index]! += 1;
            return { hits: [] };
          },
        },
      },
      { host, port, ...options },
    );
    port = replica.server.port;
    cleanups.push(() => replica.close());
    replicas.push(replica);
  }
  return { calls, port };
}

async function kbClient(target: string, channelOptions = {}) {
  const token = await testToken({ subject: "orchestrator", scopes: ["kb:read"] });
  // Exact round-robin counts: no hedges, and no replica set aside for answering late (hedge.int.test.ts covers both).
  const client = toolClient(KbSearchService, {
    target,
    token,
    registry: new Registry(),
    channelOptions,
    hedge: { enabled: false },
  });
  cleanups.push(() => client.close());
  return client;
}

/** Calls until every replica in `which` has answered once (connections are made lazily). */
async function untilAnswered(
  client: Awaited<ReturnType<typeof kbClient>>,
  calls: number[],
  which: number[],
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (which.some((i) => calls[i] === 0) && Date.now() < deadline) {
    await client.call("search", { query: "refund", limit: 1 });
    await sleep(20);
  }
}

describe("replica discovery", () => {
  it("a dns: name resolving to 3 addresses spreads calls over all 3, round robin", async () => {
    const { calls, port } = await startReplicas();
    const dns = await startDns({ addresses: podAddresses });
    const client = await kbClient(`dns://${dns}/${NAME}:${port}`);
    await untilAnswered(client, calls, [0, 1, 2], 5000);
    calls.fill(0);
    for (let i = 0; i < 30; i += 1) await client.call("search", { query: `q${i}`, limit: 1 });
    expect(calls).toEqual([10, 10, 10]);
  });

  it("replicas added to the name get calls once the max connection age makes the client resolve again", async () => {
    const { calls, port } = await startReplicas({ maxConnectionAgeMs: 1000, maxConnectionAgeGraceMs: 500 });
    const records = { addresses: [podAddresses[0]!] };
    const dns = await startDns(records);
    const client = await kbClient(`dns://${dns}/${NAME}:${port}`, { "grpc.dns_min_time_between_resolutions_ms": 200 });
    for (let i = 0; i < 10; i += 1) await client.call("search", { query: `q${i}`, limit: 1 });
    expect(calls).toEqual([10, 0, 0]);

    records.addresses = [...podAddresses];
    await untilAnswered(client, calls, [1, 2], 8000);
    expect(calls[1]).toBeGreaterThan(0);
    expect(calls[2]).toBeGreaterThan(0);
  });

  it("a client with no options of its own resolves again within seconds, not grpc-js's 30 s", async () => {
    const { calls, port } = await startReplicas({ maxConnectionAgeMs: 1000, maxConnectionAgeGraceMs: 500 });
    const records = { addresses: [podAddresses[0]!] };
    const dns = await startDns(records);
    const client = await kbClient(`dns://${dns}/${NAME}:${port}`);
    await client.call("search", { query: "refund", limit: 1 });
    records.addresses = [...podAddresses];
    // The tool client resolves again at most every 5 s: well inside 15 s, where grpc-js's default waits 30 s.
    await untilAnswered(client, calls, [1, 2], 15_000);
    expect(calls[1]).toBeGreaterThan(0);
    expect(calls[2]).toBeGreaterThan(0);
  });
});
