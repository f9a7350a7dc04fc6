// A suite's ports: held machine-wide for its lifetime by a lock per port in the temporary folder
// (<tmp>/loopguard-port-<port>.pid), so a second suite on another data folder is refused at once
// rather than starting while the first one's services are not listening yet; and free of any
// other program's, checked before the start.
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { takePidLock } from "./pid-lock.js";
import { SuiteLockError } from "./suite-lock.js";

export interface ServicePort {
  readonly spec: ServiceSpec;
  readonly what: "gRPC" | "HTTP";
  readonly port: number;
  /** The variable the service reads it from. */
  readonly variable: string;
}

export function servicePorts(spec: ServiceSpec): ServicePort[] {
  return [
    { spec, what: "gRPC", port: spec.port, variable: `${spec.envPrefix}_PORT` },
    { spec, what: "HTTP", port: spec.metricsPort, variable: spec.metricsPortEnv },
  ];
}

const named = (p: ServicePort) => `port ${p.port} (${p.spec.name} ${p.what}, ${p.variable})`;

export function portInUse(p: ServicePort): SuiteLockError {
  return new SuiteLockError(
    `${named(p)} is in use on 127.0.0.1: another suite (another data folder?) or program holds it; stop it first`,
  );
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** The first of the service's ports some process holds. */
export async function portTaken(spec: ServiceSpec): Promise<ServicePort | undefined> {
  for (const p of servicePorts(spec)) if (!(await portFree(p.port))) return p;
  return undefined;
}

/** Refuses to start while another program holds a service's port. */
export async function requireFreePorts(specs: readonly ServiceSpec[]): Promise<void> {
  for (const spec of specs) {
    const taken = await portTaken(spec);
    if (taken) throw portInUse(taken);
  }
}

/** Takes every port of the suite for this process, or none; returns what lets them go. */
export function lockPorts(specs: readonly ServiceSpec[]): () => void {
  const held: (() => void)[] = [];
  const release = () => {
    for (const letGo of held.splice(0)) letGo();
  };
  try {
    for (const p of specs.flatMap(servicePorts).sort((a, b) => a.port - b.port)) {
      const lock = takePidLock(join(tmpdir(), `loopguard-port-${p.port}.pid`));
      if ("release" in lock) {
        held.push(lock.release);
        continue;
      }
      throw new SuiteLockError(
        lock.holder === undefined
          ? `${named(p)} is being taken by another start at this moment; try again`
          : `${named(p)} is held by another suite (supervisor pid ${lock.holder}): stop it (Ctrl-C where it runs, or kill ${lock.holder}) first`,
      );
    }
  } catch (error) {
    release();
    throw error;
  }
  return release;
}
