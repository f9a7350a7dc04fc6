// grpc.health.v1 as a client of the generated contract: one Check, and a wait until a server
// reports SERVING (the supervisor's readiness; tests' probes).
import { setTimeout as sleep } from "node:timers/promises";
import { Health, HealthCheckResponse_ServingStatus } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { createRawClient } from "./raw-client.js";

export type HealthStatus = keyof typeof HealthCheckResponse_ServingStatus;

// A server that is not listening yet is retried within the wait, not after grpc-js's default 1–120 s reconnect backoff.
const PROBE_CHANNEL = { "grpc.initial_reconnect_backoff_ms": 50, "grpc.max_reconnect_backoff_ms": 250 };

/** grpc.health.v1.Health/Check against a server; "" asks for the server as a whole. */
export async function checkHealth(address: string, service = "", timeoutMs = 2000): Promise<HealthStatus> {
  const client = createRawClient(Health, address, { channelOptions: PROBE_CHANNEL });
  try {
    const reply = await client.check({ service }, { deadline: timeoutMs });
    return HealthCheckResponse_ServingStatus[reply.status] as HealthStatus;
  } finally {
    client.close();
  }
}

/**
 * Resolves once the server at `address` answers Check with SERVING; until then (not listening yet,
 * NOT_SERVING) asks again every `intervalMs`. Rejects with the signal's reason when it aborts.
 */
export async function waitUntilServing(address: string, signal: AbortSignal, intervalMs = 100): Promise<void> {
  const client = createRawClient(Health, address, { channelOptions: PROBE_CHANNEL });
  try {
    for (;;) {
      signal.throwIfAborted();
      const reply = await client
        .check({ service: "" }, { deadline: Math.max(intervalMs, 1000) })
        .catch(() => undefined);
      if (reply?.status === HealthCheckResponse_ServingStatus.SERVING) return;
      await sleep(intervalMs, undefined, { signal });
    }
  } finally {
    client.close();
  }
}
