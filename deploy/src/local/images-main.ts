// `pnpm images [--tag T] [image…]`: builds and tags the image of every service and the drill
// runner's (or the named ones); prints each image's references, size and build time. See images.ts for the tag scheme.
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { runCli, UsageError } from "../cli.js";
import { takeBuildTurn } from "./build-turn.js";
import { requireDockerEngine } from "./docker.js";
import {
  buildImage,
  checkTag,
  DRILL_RUNNER_RECIPE,
  ensureBaseImage,
  imageRepository,
  serviceRecipe,
  sourceRevision,
} from "./images.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

async function main(): Promise<number> {
  const parsed = (() => {
    try {
      return parseArgs({ options: { tag: { type: "string" } }, allowPositionals: true });
    } catch (error) {
      throw new UsageError(`${(error as Error).message.split(". ")[0]}; usage: pnpm images [--tag T] [image…]`);
    }
  })();

  const { values, positionals } = parsed;
  const all = [...discoverServices(join(root, "services")).map(serviceRecipe), DRILL_RUNNER_RECIPE];
  const unknown = positionals.filter((name) => !all.some((s) => s.name === name));
  if (unknown.length > 0)
    throw new UsageError(`unknown image ${unknown.join(", ")} (images: ${all.map((s) => s.name).join(", ")})`);
  const specs = positionals.length > 0 ? all.filter((s) => positionals.includes(s.name)) : all;
  const revision = sourceRevision(root);
  const tag = checkTag(values.tag ?? revision.tag);
  imageRepository("check");
  const cpus = buildCpus(process.env.LOOPGUARD_IMAGE_BUILD_CPUS);
  await requireDockerEngine();
  const log = (line: string) => process.stdout.write(`${line}\n`);
  const release = await takeBuildTurn(log);
  try {
    await ensureBaseImage(root, log);
    const logDir = join(resolve(process.env.LOOPGUARD_DATA_DIR || join(root, ".data")), "images");
    log(`building ${specs.length} image(s), tag ${tag} (build logs in ${logDir})`);
    for (const spec of specs) {
      const built = await buildImage(spec, { root, tag, revision, logDir, ...(cpus ? { cpus } : {}) });
      log(
        `  ${built.references.join("  ").padEnd(60)} ${(built.sizeBytes / 1e6).toFixed(0).padStart(4)} MB  ${built.seconds.toFixed(0).padStart(4)} s`,
      );
    }
  } finally {
    await release();
  }
  return 0;
}

/** LOOPGUARD_IMAGE_BUILD_CPUS: the cores a build's steps may use (e.g. 0.5 beside tests); unset: all. */
function buildCpus(value: string | undefined): number | undefined {
  if (value === undefined || value === "") return undefined;
  const cpus = Number(value);
  if (!Number.isFinite(cpus) || cpus < 0.01 || cpus > 1024)
    throw new UsageError(`LOOPGUARD_IMAGE_BUILD_CPUS must be a number of cores from 0.01 to 1024, got "${value}"`);
  return cpus;
}

runCli("images", main);
