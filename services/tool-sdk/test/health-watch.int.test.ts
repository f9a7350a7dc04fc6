// grpc.health.v1.Health/Watch needs no token (probes and load balancers call it): what a caller
// sends must not outlive its call. A real tool over loopback, a raw grpc-js client, the heap after
// a forced collection.
import { setTimeout as sleep } from "node:timers/promises";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Client, credentials } from "@grpc/grpc-js";
import {
  type HealthCheckResponse,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus,
  HealthCheckResponseSchema,
} from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterAll, describe, expect, it } from "vitest";
import { SAMPLE_HIT, startTestTool } from "../testing/index.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heapAfterGc = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const tool = await startTestTool({
  service: KbSearchService,
  handlers: { search: async () => ({ hits: [SAMPLE_HIT] }) },
});
const client = new Client(tool.address, credentials.createInsecure());
afterAll(async () => {
  client.close();
  await tool.close();
});

/** Watches `service` until its first answer, then cancels; that answer. */
async function watchOnce(service: string): Promise<HealthCheckResponse> {
  const call = client.makeServerStreamRequest(
    "/grpc.health.v1.Health/Watch",
    (m: Uint8Array) => Buffer.from(m),
    (b: Buffer) => fromBinary(HealthCheckResponseSchema, b),
    toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service })),
  );
  call.on("error", () => undefined);
  const [first] = (await new Promise((resolve, reject) => {
    call.once("data", (answer) => resolve([answer]));
    call.once("error", reject);
  })) as [HealthCheckResponse];
  call.cancel();
  return first;
}

describe("Health/Watch", () => {
  it("answers the served names and SERVICE_UNKNOWN for any other", async () => {
    expect((await watchOnce("")).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await watchOnce(KbSearchService.typeName)).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await watchOnce("no.such.Service")).status).toBe(HealthCheckResponse_ServingStatus.SERVICE_UNKNOWN);
  });

  it("keeps nothing of an ended call's service name: 40 names of 1 MB leave the heap as it was", async () => {
    await watchOnce("warm-up");
    const before = heapAfterGc();
    for (let i = 0; i < 40; i += 1) await watchOnce(`${i}-`.padEnd(1_000_000, "x"));
    // The cancels reach the server.
    await sleep(300);
    const grown = heapAfterGc() - before;
    expect(grown, `${(grown / 1e6).toFixed(1)} MB kept`).toBeLessThan(10_000_000);
  });

  it("does not hold a shutdown past its drain: an open Watch hears NOT_SERVING, then the tool stops within a second, not its 5 s grace", async () => {
    const own = await startTestTool({
      service: KbSearchService,
      handlers: { search: async () => ({ hits: [SAMPLE_HIT] }) },
    });
    const watcher = new Client(own.address, credentials.createInsecure());
    const heard: string[] = [];
    const call = watcher.makeServerStreamRequest(
      "/grpc.health.v1.Health/Watch",
      (m: Uint8Array) => Buffer.from(m),
      (b: Buffer) => fromBinary(HealthCheckResponseSchema, b),
      toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "" })),
    );
    call.on("data", (answer: HealthCheckResponse) => heard.push(HealthCheckResponse_ServingStatus[answer.status]));
    const ended = new Promise((resolve) => call.on("error", resolve));
    await expect.poll(() => heard).toEqual(["SERVING"]);
    const started = performance.now();
    await own.close();
    const tookMs = performance.now() - started;
    await ended;
    watcher.close();
    expect(heard).toEqual(["SERVING", "NOT_SERVING"]);
    expect(tookMs).toBeLessThan(2000);
  });
});
