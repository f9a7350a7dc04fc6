// The services the local suite runs, discovered from the workspace: every services/*/package.json
// with a "loopguard" field, so a new tool joins `pnpm start` without anyone editing a list.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface ServiceSpec {
  readonly name: string;
  /** "tool" or "orchestrator": only the orchestrator signs tokens and gets a private key. */
  readonly kind: string;
  readonly dir: string;
  readonly entry: string;
  readonly port: number;
  readonly metricsPort: number;
  /** Prefix of the service's variables, e.g. BILLING → BILLING_PORT. */
  readonly envPrefix: string;
  /** Variable naming the HTTP port, when not <PREFIX>_METRICS_PORT. */
  readonly metricsPortEnv: string;
}

interface Manifest {
  name?: string;
  loopguard?: { kind?: string; entry?: string; port?: number; metricsPort?: number; envPrefix?: string; metricsPortEnv?: string };
}

export function discoverServices(servicesDir: string): ServiceSpec[] {
  const specs: ServiceSpec[] = [];
  for (const name of readdirSync(servicesDir).sort()) {
    const manifestPath = join(servicesDir, name, "package.json");
    if (!existsSync(manifestPath)) continue;
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as Manifest;
    const lg = manifest.loopguard;
    if (!lg) continue;
    if (!lg.kind || !lg.entry || !lg.port || !lg.metricsPort || !lg.envPrefix) {
      throw new Error(`${manifestPath}: "loopguard" needs kind, entry, port, metricsPort and envPrefix`);
    }
    specs.push({ name, kind: lg.kind, dir: join(servicesDir, name), entry: join(servicesDir, name, lg.entry), port: lg.port, metricsPort: lg.metricsPort, envPrefix: lg.envPrefix, metricsPortEnv: lg.metricsPortEnv ?? `${lg.envPrefix}_METRICS_PORT` });
  }
  return specs;
}
