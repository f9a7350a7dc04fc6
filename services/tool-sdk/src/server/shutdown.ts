// Health and shutdown as one unit: NOT_SERVING → drain (streams ended, calls in flight waited for up
// to the grace period) → tryShutdown bounded by a timer → forceShutdown → the HTTP port → close.
import type { Server as HttpServer } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { Server } from "@grpc/grpc-js";
import { status, ToolError } from "../errors.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import { shutdownTelemetry } from "../telemetry.js";
import type { CallSlots } from "./slots.js";

export interface StopParts {
  readonly tool: string;
  readonly log: Logger;
  readonly metrics: ServerMetrics;
  readonly slots: CallSlots;
  readonly server: Server;
  readonly http: HttpServer;
  readonly notServing: () => void;
  readonly graceMs: number;
  readonly close: (() => void | Promise<void>) | undefined;
}

/** How long the calls the drain does not track (health Watch, reflection) may hold a shutdown once the rest drained. */
const UNTRACKED_CALLS_MS = 1000;

/** The server's shutdown, idempotent: every call after the first gets the same promise. */
export function shutdownOf(parts: StopParts): () => Promise<void> {
  const { tool, log, slots, server, graceMs } = parts;
  let shutdownPromise: Promise<void> | undefined;
  return () => {
    shutdownPromise ??= (async () => {
      parts.metrics.serving.set({ tool }, 0);
      parts.notServing();
      log.info("draining", { tool, in_flight: slots.inFlight, streams: slots.streams.size, grace_ms: graceMs });
      // Streams may stay open for as long as what they follow (an hour): they are ended now, and
      // their callers (told UNAVAILABLE, retry at once) reopen them on another replica.
      const quiet = slots.drain(
        new ToolError(status.UNAVAILABLE, "SHUTTING_DOWN", `${tool} is shutting down; reopen the stream`, {
          retryAfterMs: 0,
        }),
      );
      const timedOut = await Promise.race([quiet.then(() => false), sleep(graceMs).then(() => true)]);
      if (timedOut) log.warn("grace period over; cancelling calls in flight", { tool, in_flight: slots.inFlight });
      // What is still open once the calls drained is what the drain does not track: a health Watch
      // (told NOT_SERVING), a reflection stream. Anyone may hold one, so it gets a moment, not a grace.
      await new Promise<void>((resolve) => {
        const force = setTimeout(
          () => {
            server.forceShutdown();
            resolve();
          },
          timedOut ? 0 : Math.min(graceMs, UNTRACKED_CALLS_MS),
        );
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      const closed = new Promise<void>((resolve) => parts.http.close(() => resolve()));
      // The calls are drained: what is left on the HTTP port is idle, or a request that never
      // finished arriving, which close() alone would wait for.
      parts.http.closeAllConnections();
      await closed;
      await parts.close?.();
      log.info("stopped", { tool });
    })();
    return shutdownPromise;
  };
}

/** SIGTERM/SIGINT, or the end of the supervisor's stdin pipe: shut down, flush telemetry, exit 0 (1 if shutdown failed). */
export function exitOnSignals(shutdown: () => Promise<void>, log: Logger): void {
  let stopping = false;
  const stop = (why: string, fields: Record<string, string>) => {
    // A second signal (a Ctrl-C that reaches the service from the terminal and from the supervisor,
    // an impatient operator) must not end the drain: the calls in flight would be cut.
    if (stopping) {
      log.info("already draining; signal ignored", fields);
      return;
    }
    stopping = true;
    log.info(why, fields);
    shutdown()
      .then(shutdownTelemetry)
      .then(
        () => process.exit(0),
        (error: unknown) => {
          log.error("shutdown failed", { error_name: error instanceof Error ? error.name : "unknown" });
          process.exit(1);
        },
      );
  };
  for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => stop("signal received", { signal }));
  // A log pipe whose reader is gone (a supervisor killed) loses lines, never the service.
  for (const stream of [process.stdout, process.stderr])
    stream.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code !== "EPIPE") throw error;
    });
  // Run by `pnpm start`'s supervisor, stdin is a pipe from it: its end is the supervisor's, however
  // it ended (a SIGKILL too), and the service drains and exits rather than run on without it.
  if (process.env[SUPERVISED_ENV] === "1") {
    process.stdin.once("end", () => stop("supervisor gone", { reason: "stdin closed" }));
    process.stdin.resume();
    (process.stdin as { unref?: () => void }).unref?.();
  }
}

/** Set by `pnpm start`'s supervisor on each service it runs, whose stdin is then a pipe from it. */
export const SUPERVISED_ENV = "LOOPGUARD_SUPERVISED";
