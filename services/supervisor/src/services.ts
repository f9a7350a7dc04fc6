// The services the local suite runs, discovered from the workspace: every services/*/package.json
// with a "loopguard" field, so a new tool joins `pnpm start` without anyone editing a list.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface ServiceSpec {
  readonly name: string;
  readonly dir: string;
  readonly entry: string;
  readonly port: number;
  readonly metricsPort: number;
  /** Prefix of the service's variables, e.g. BILLING → BILLING_PORT. */
  readonly envPrefix: string;
  /** Variable naming the HTTP port, when not <PREFIX>_METRICS_PORT. */
  readonly metricsPortEnv: string;
  /** Local secrets the service needs: variable → file name in the data folder (made on first start). */
  readonly secrets: Readonly<Record<string, string>>;
  /** Variables given to this service alone, on top of the supervisor's. */
  readonly env: Readonly<Record<string, string>>;
}

interface Manifest {
  name?: string;
  loopguard?: { entry?: string; port?: number; metricsPort?: number; envPrefix?: string; metricsPortEnv?: string; secrets?: Record<string, string> };
}

export function discoverServices(servicesDir: string): ServiceSpec[] {
  const specs: ServiceSpec[] = [];
  for (const name of readdirSync(servicesDir).sort()) {
    const manifestPath = join(servicesDir, name, "package.json");
    if (!existsSync(manifestPath)) continue;
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as Manifest;
    const lg = manifest.loopguard;
    if (!lg) continue;
    if (!lg.entry || !lg.port || !lg.metricsPort || !lg.envPrefix) {
      throw new Error(`${manifestPath}: "loopguard" needs entry, port, metricsPort and envPrefix`);
    }
    const secrets = lg.secrets ?? {};
    for (const [variable, file] of Object.entries(secrets)) {
      if (!/^[A-Z][A-Z0-9_]*$/.test(variable) || !/^[\w.-]+$/.test(file)) {
        throw new Error(`${manifestPath}: "loopguard.secrets" maps variable names to file names in the data folder, got ${variable}: ${file}`);
      }
    }
    specs.push({ name, dir: join(servicesDir, name), entry: join(servicesDir, name, lg.entry), port: lg.port, metricsPort: lg.metricsPort, envPrefix: lg.envPrefix, metricsPortEnv: lg.metricsPortEnv ?? `${lg.envPrefix}_METRICS_PORT`, secrets, env: {} });
  }
  return specs;
}
