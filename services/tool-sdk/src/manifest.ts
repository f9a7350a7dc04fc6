// The services of the suite, discovered from the workspace: every services/*/package.json with a
// "loopguard" field, so a new tool joins `pnpm start`, the Prometheus config, the Kubernetes
// manifests, the orchestrator's local addresses and the test harnesses without anyone editing a
// list. This is the one reader of those manifests (the supervisor, deploy, the tools' own main.ts
// and the tests all import it).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ToolDefaults } from "./config.js";

export type ServiceKind = "tool" | "orchestrator";

export interface ServiceSpec {
  readonly name: string;
  /** The workspace package, "@loopguard/<tool>". */
  readonly packageName: string;
  readonly description: string;
  readonly kind: ServiceKind;
  readonly dir: string;
  readonly entry: string;
  readonly port: number;
  readonly metricsPort: number;
  /** Prefix of the service's variables, e.g. BILLING → BILLING_PORT. */
  readonly envPrefix: string;
  /** Variable naming the HTTP port, when not <PREFIX>_METRICS_PORT. */
  readonly metricsPortEnv: string;
  /** Keeps state in the store named by <PREFIX>_STORE (sqlite:… or postgres://…), so more than one replica needs PostgreSQL. */
  readonly stateful: boolean;
  /** Variable → "secret/key": a file the service reads from a secret, e.g. RISK_CUSTOMER_KEY_PEPPER_FILE → "loopguard-risk-pepper/pepper". */
  readonly secretFiles: Readonly<Record<string, string>>;
  /**
   * Those of secretFiles its schema commands (migrate, wait-for-schema) read too, e.g. risk's
   * pepper, which keys the rows its migrations write. The others stay out of its migration Job
   * and init container: the orchestrator's signing key signs every tool call, and migrating needs none.
   */
  readonly schemaSecretFiles?: readonly string[];
}

interface Manifest {
  name?: string;
  description?: string;
  loopguard?: {
    kind?: unknown;
    entry?: string;
    port?: number;
    metricsPort?: number;
    envPrefix?: string;
    metricsPortEnv?: string;
    stateful?: unknown;
    secretFiles?: unknown;
    schemaSecretFiles?: unknown;
  };
}

const KINDS: readonly ServiceKind[] = ["tool", "orchestrator"];

function secretFiles(value: unknown, manifestPath: string): Record<string, string> {
  if (value === undefined) return {};
  const valid =
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    Object.entries(value).every(
      ([name, ref]) =>
        /^[A-Z][A-Z0-9_]*$/.test(name) && typeof ref === "string" && /^[a-z0-9-]+\/[A-Za-z0-9._-]+$/.test(ref),
    );
  if (!valid) throw new Error(`${manifestPath}: "loopguard".secretFiles must map VARIABLE names to "secret-name/key"`);
  return value as Record<string, string>;
}

/** The service in `dir` (its package.json's "loopguard" field), or undefined when it is no service (a library). */
export function readManifest(dir: string): ServiceSpec | undefined {
  const name = basename(dir);
  const manifestPath = join(dir, "package.json");
  if (!existsSync(manifestPath)) return undefined;
  const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as Manifest;
  const lg = manifest.loopguard;
  if (!lg) return undefined;
  if (!lg.entry || !lg.port || !lg.metricsPort || !lg.envPrefix) {
    throw new Error(`${manifestPath}: "loopguard" needs entry, port, metricsPort and envPrefix`);
  }
  if (!KINDS.includes(lg.kind as ServiceKind))
    throw new Error(`${manifestPath}: "loopguard".kind must be one of ${KINDS.join(", ")}`);
  if (lg.stateful !== undefined && typeof lg.stateful !== "boolean")
    throw new Error(`${manifestPath}: "loopguard".stateful must be true or false`);
  const files = secretFiles(lg.secretFiles, manifestPath);
  return {
    name,
    packageName: manifest.name ?? name,
    description: manifest.description ?? "",
    kind: lg.kind as ServiceKind,
    dir,
    entry: join(dir, lg.entry),
    port: lg.port,
    metricsPort: lg.metricsPort,
    envPrefix: lg.envPrefix,
    metricsPortEnv: lg.metricsPortEnv ?? `${lg.envPrefix}_METRICS_PORT`,
    stateful: lg.stateful ?? false,
    secretFiles: files,
    schemaSecretFiles: schemaSecretFiles(lg.schemaSecretFiles, files, manifestPath),
  };
}

function schemaSecretFiles(value: unknown, files: Record<string, string>, manifestPath: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((name) => typeof name === "string" && name in files))
    throw new Error(`${manifestPath}: "loopguard".schemaSecretFiles must list variables of its secretFiles`);
  return value;
}

/** Every service under `servicesDir` (e.g. the workspace's services/), by folder name. */
export function discoverServices(servicesDir: string): ServiceSpec[] {
  return readdirSync(servicesDir)
    .sort()
    .flatMap((name) => readManifest(join(servicesDir, name)) ?? []);
}

/** A service's default ports from its own manifest, for its main module `mainUrl` (dist/main.js → ../package.json, in an image too). */
export function manifestDefaults(mainUrl: string): ToolDefaults {
  const dir = fileURLToPath(new URL("..", mainUrl));
  const spec = readManifest(dir);
  if (!spec) throw new Error(`${join(dir, "package.json")} has no "loopguard" field`);
  return { port: spec.port, metricsPort: spec.metricsPort };
}
