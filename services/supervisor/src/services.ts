// The services the local suite runs, discovered from the workspace: every services/*/package.json
// with a "loopguard" field, so a new tool joins `pnpm start` without anyone editing a list.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface ServiceSpec {
  readonly name: string;
  /** The workspace package, e.g. "@loopguard/billing". */
  readonly packageName: string;
  readonly description: string;
  readonly kind: "tool" | "orchestrator";
  readonly dir: string;
  readonly entry: string;
  readonly port: number;
  readonly metricsPort: number;
  /** Prefix of the service's variables, e.g. BILLING → BILLING_PORT. */
  readonly envPrefix: string;
  /** Variable naming the HTTP port, when not <PREFIX>_METRICS_PORT. */
  readonly metricsPortEnv: string;
  /** Keeps state of its own (a database), so its replicas must share a store. */
  readonly stateful: boolean;
  /** Variable naming a store shared by replicas (`sqlite:…` or `postgres://…`), if it has one. */
  readonly storeEnv: string | undefined;
}

interface Manifest {
  name?: string;
  description?: string;
  loopguard?: {
    kind?: string;
    entry?: string;
    port?: number;
    metricsPort?: number;
    envPrefix?: string;
    metricsPortEnv?: string;
    stateful?: boolean;
    storeEnv?: string;
  };
}

export function discoverServices(servicesDir: string): ServiceSpec[] {
  const specs: ServiceSpec[] = [];
  for (const name of readdirSync(servicesDir).sort()) {
    const manifestPath = join(servicesDir, name, "package.json");
    if (!existsSync(manifestPath)) continue;
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as Manifest;
    const lg = manifest.loopguard;
    if (!lg) continue;
    if (!lg.entry || !lg.port || !lg.metricsPort || !lg.envPrefix || (lg.kind !== "tool" && lg.kind !== "orchestrator")) {
      throw new Error(`${manifestPath}: "loopguard" needs kind ("tool" or "orchestrator"), entry, port, metricsPort and envPrefix`);
    }
    specs.push({
      name,
      packageName: manifest.name ?? name,
      description: manifest.description ?? "",
      kind: lg.kind,
      dir: join(servicesDir, name),
      entry: join(servicesDir, name, lg.entry),
      port: lg.port,
      metricsPort: lg.metricsPort,
      envPrefix: lg.envPrefix,
      metricsPortEnv: lg.metricsPortEnv ?? `${lg.envPrefix}_METRICS_PORT`,
      stateful: lg.stateful === true,
      storeEnv: lg.storeEnv,
    });
  }
  return specs;
}
