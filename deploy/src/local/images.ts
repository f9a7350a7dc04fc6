// Builds one image per service from deploy/docker/Dockerfile, and the drill runner's from the same
// build. Services are the workspace's own (services/*/package.json with a "loopguard" field, read
// by the supervisor's discovery), so a new tool gets an image without anyone editing a list.
//
// Tag scheme: <registry>/loopguard/<service>:<tag>, where <registry>/ is LOOPGUARD_IMAGE_REGISTRY
// (empty by default) and <tag> is --tag or the git short commit, with "-dirty" when the work tree
// has uncommitted changes; every build is also tagged :latest.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { docker, DockerError, dockerToLog, imageExists } from "./docker.js";

export const BASE_IMAGE = "node:24-bookworm-slim";
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const REGISTRY = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d+)?(\/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$/;

export class ImageError extends Error {
  override readonly name = "ImageError";
}

/** "loopguard/<service>", under LOOPGUARD_IMAGE_REGISTRY when it is set. */
export function imageRepository(service: string, env: NodeJS.ProcessEnv = process.env): string {
  const registry = (env.LOOPGUARD_IMAGE_REGISTRY ?? "").replace(/\/+$/, "");
  if (registry && !REGISTRY.test(registry)) {
    throw new ImageError(
      `LOOPGUARD_IMAGE_REGISTRY must look like registry.example.com[:port][/path], got "${registry}"`,
    );
  }
  return `${registry ? `${registry}/` : ""}loopguard/${service}`;
}

export function checkTag(tag: string): string {
  if (!TAG.test(tag))
    throw new ImageError(`--tag must be 1-128 of [A-Za-z0-9_.-], not starting with . or -, got "${tag}"`);
  return tag;
}

function git(root: string, args: string[]): string {
  return execFileSync("git", args, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
}

export interface SourceRevision {
  /** The default tag: short commit, "-dirty" with uncommitted changes. */
  readonly tag: string;
  readonly revision: string;
  readonly source: string;
}

export function sourceRevision(root: string, env: NodeJS.ProcessEnv = process.env): SourceRevision {
  let commit: string;
  try {
    commit = git(root, ["rev-parse", "HEAD"]);
  } catch {
    throw new ImageError(`${root} is not a git checkout with a commit: pass --tag`);
  }
  const dirty = git(root, ["status", "--porcelain"]) !== "";
  let remote = "";
  try {
    remote = git(root, ["remote", "get-url", "origin"]);
  } catch {
    remote = "";
  }
  return {
    tag: `${commit.slice(0, 7)}${dirty ? "-dirty" : ""}`,
    revision: `${commit}${dirty ? "-dirty" : ""}`,
    source: env.LOOPGUARD_IMAGE_SOURCE || remote,
  };
}

/** Makes the base image with deploy/docker/node-base-image.sh when it is missing. */
export async function ensureBaseImage(root: string, log: (line: string) => void): Promise<void> {
  if (await imageExists(BASE_IMAGE)) return;
  log(`${BASE_IMAGE} is missing: building it locally (deploy/docker/node-base-image.sh, needs root)`);
  try {
    execFileSync("bash", [join(root, "deploy", "docker", "node-base-image.sh")], { stdio: "inherit" });
  } catch {
    throw new ImageError(
      `could not build ${BASE_IMAGE}; run deploy/docker/node-base-image.sh as root and see its message`,
    );
  }
}

export interface BuiltImage {
  readonly service: string;
  readonly references: readonly string[];
  readonly sizeBytes: number;
  readonly seconds: number;
}

export interface BuildOptions {
  readonly root: string;
  readonly tag: string;
  readonly revision: SourceRevision;
  readonly logDir: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Cores the build's steps may use at most (docker's CFS quota); all of them when not set. */
  readonly cpus?: number;
}

/** What one image is built from: the Dockerfile's stage (the services' when undefined) and its build arguments. */
export interface ImageRecipe {
  readonly name: string;
  readonly target?: string;
  readonly args: Readonly<Record<string, string>>;
}

/** A service's image, from its manifest. */
export function serviceRecipe(spec: ServiceSpec): ImageRecipe {
  return {
    name: spec.name,
    args: {
      SERVICE: spec.name,
      PACKAGE: spec.packageName,
      ENV_PREFIX: spec.envPrefix,
      PORT: String(spec.port),
      METRICS_PORT: String(spec.metricsPort),
      ENTRY: relative(spec.dir, spec.entry),
      DESCRIPTION: spec.description || `loopguard ${spec.name}`,
    },
  };
}

/** The image the chaos-drills component's Job runs: deploy's drill runner, from the same build as the services. */
export const DRILL_RUNNER_RECIPE: ImageRecipe = {
  name: "drill-runner",
  target: "drill-runner",
  args: {},
};

export async function buildImage(recipe: ImageRecipe, options: BuildOptions): Promise<BuiltImage> {
  const { root, tag } = options;
  const repository = imageRepository(recipe.name, options.env);
  const references = [`${repository}:${tag}`, `${repository}:latest`];
  const pnpm = /^pnpm@(.+)$/.exec(
    (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { packageManager?: string }).packageManager ?? "",
  );
  const args: Record<string, string> = {
    ...recipe.args,
    SOURCE: options.revision.source,
    VERSION: tag,
    REVISION: options.revision.revision,
    CREATED: new Date().toISOString(),
    ...(pnpm ? { PNPM_VERSION: pnpm[1]! } : {}),
  };
  mkdirSync(options.logDir, { recursive: true });
  const logFile = join(options.logDir, `${recipe.name}.log`);
  const started = performance.now();
  await dockerToLog(
    [
      "build",
      "--network",
      "host",
      "--force-rm",
      ...(options.cpus ? ["--cpu-period", "100000", "--cpu-quota", String(Math.round(options.cpus * 100_000))] : []),
      "--file",
      join(root, "deploy", "docker", "Dockerfile"),
      ...(recipe.target ? ["--target", recipe.target] : []),
      ...Object.entries(args).flatMap(([key, value]) => ["--build-arg", `${key}=${value}`]),
      ...references.flatMap((reference) => ["--tag", reference]),
      root,
    ],
    logFile,
    { ...process.env, DOCKER_BUILDKIT: "0" },
  );
  const seconds = (performance.now() - started) / 1000;
  const size = Number((await docker(["image", "inspect", "--format", "{{.Size}}", references[0]!])).trim());
  if (!Number.isFinite(size)) throw new DockerError(`cannot read the size of ${references[0]}`);
  return { service: recipe.name, references, sizeBytes: size, seconds };
}
