// grpc.health.v1 as a client of the generated contract: a Check under a deadline, once or again
// and again on one connection (the supervisor's liveness probe), and a wait until a server reports
// SERVING (the supervisor's readiness; tests' probes).
import { setTimeout as sleep } from "node:timers/promises";
import { Health, HealthCheckResponse_ServingStatus } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { createRawClient } from "./raw-client.js";

export type HealthStatus = keyof typeof HealthCheckResponse_ServingStatus;

// A server that is not listening yet is retried within the wait, not after grpc-js's default 1–120 s reconnect backoff.
const PROBE_CHANNEL = { "grpc.initial_reconnect_backoff_ms": 50, "grpc.max_reconnect_backoff_ms": 250 };

/** Repeated checks of one server over one connection, until closed. */
export interface HealthChecker {
  /** grpc.health.v1.Health/Check under a deadline; "" asks for the server as a whole. */
  check(timeoutMs: number, service?: string): Promise<HealthStatus>;
  close(): void;
}

/**
 * A checker kept open for a probe that asks every few seconds (the supervisor's liveness): one
 * channel for all its checks, where a client per check would connect anew each time.
 */
export function healthChecker(address: string): HealthChecker {
  const client = createRawClient(Health, address, { channelOptions: PROBE_CHANNEL });
  return {
    async check(timeoutMs, service = "") {
      const reply = await client.check({ service }, { deadline: timeoutMs });
      return HealthCheckResponse_ServingStatus[reply.status] as HealthStatus;
    },
    close: () => client.close(),
  };
}

/** grpc.health.v1.Health/Check against a server; "" asks for the server as a whole. */
export async function checkHealth(address: string, service = "", timeoutMs = 2000): Promise<HealthStatus> {
  const checker = healthChecker(address);
  try {
    return await checker.check(timeoutMs, service);
  } finally {
    checker.close();
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
