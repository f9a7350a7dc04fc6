// The contract compatibility gate of a release: `buf breaking` of the contracts inside the image
// being released against those inside the image that is live, limited to the files the tool
// serves (its service's file, the admin service every tool mounts, and what they import of
// loopguard's). Each image carries its contracts as a FileDescriptorSet (deploy/docker/Dockerfile,
// label io.loopguard.contracts), so the gate compares what actually runs, not this checkout.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DescFile } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import { IMAGE_DESCRIPTOR_SET_LABEL } from "@loopguard/proto/descriptor-set";
import { ADMIN_TOOL_NAME, servicePolicy, servicesOf } from "@loopguard/tool-sdk";
import { docker, imageExists } from "../../local/docker.js";

/** A release that must not go ahead; `detail` holds what explains it (buf's findings). */
export class ReleaseRefused extends Error {
  override readonly name = "ReleaseRefused";
  constructor(
    message: string,
    readonly detail = "",
  ) {
    super(message);
  }
}

/** The .proto files whose wire contract a tool's clients depend on. */
export function toolContractPaths(tool: string, files: readonly DescFile[] = contractFiles): string[] {
  const serving = (name: string) => servicesOf(files).find((s) => servicePolicy(s).toolName === name)?.file;
  const own = serving(tool);
  if (!own) throw new ReleaseRefused(`no contract serves the tool "${tool}"`);
  const paths = new Set<string>();
  const visit = (file: DescFile): void => {
    if (!file.name.startsWith("loopguard/") || paths.has(`${file.name}.proto`)) return;
    paths.add(`${file.name}.proto`);
    file.dependencies.forEach(visit);
  };
  visit(own);
  const admin = serving(ADMIN_TOOL_NAME);
  if (admin) visit(admin);
  return [...paths].sort();
}

/**
 * Copies the file an image's label `label` names (what the image carries about itself: its
 * contracts, its migrations) to `target`; an image that is not here is pulled when `pull` says so
 * (a cluster's registry).
 */
export async function extractLabelledFile(
  image: string,
  label: string,
  target: string,
  pull: boolean,
  what: string,
): Promise<string> {
  if (!(await imageExists(image))) {
    if (!pull)
      throw new ReleaseRefused(
        `image ${image} is missing: build it with \`pnpm images --tag ${image.split(":").at(-1)}\``,
      );
    try {
      await docker(["pull", image], { timeoutMs: 600_000 });
    } catch (error) {
      throw new ReleaseRefused(
        `cannot read the ${what} of ${image}: the image is not here and ${(error as Error).message}`,
      );
    }
  }
  const path = (await docker(["image", "inspect", "--format", `{{ index .Config.Labels "${label}" }}`, image])).trim();
  if (!path || path === "<no value>") {
    throw new ReleaseRefused(
      `${image} carries no ${what} (label ${label}): it was built before releases checked them; rebuild it with \`pnpm images\``,
    );
  }
  const container = (await docker(["create", image])).trim();
  try {
    await docker(["cp", `${container}:${path}`, target]);
  } finally {
    // With its volumes: the image's VOLUME /data gave the container an anonymous one.
    await docker(["rm", "--force", "--volumes", container]).catch(() => undefined);
  }
  return target;
}

/** Copies the contracts an image carries into `dir`. */
function extractContracts(image: string, dir: string, name: string, pull: boolean): Promise<string> {
  return extractLabelledFile(image, IMAGE_DESCRIPTOR_SET_LABEL, join(dir, `${name}.binpb`), pull, "contracts");
}

export interface ContractCheck {
  readonly tool: string;
  readonly live: string;
  readonly candidate: string;
  readonly paths: readonly string[];
  /** Pull an image that is not here (images of a cluster's registry); local releases use local builds only. */
  readonly pull: boolean;
}

function bufBreaking(args: readonly string[]): Promise<{ code: number; output: string }> {
  const buf = createRequire(import.meta.url).resolve("@bufbuild/buf/bin/buf");
  return new Promise((resolve, reject) => {
    execFile(buf, args, { timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
      if (code === -1) return reject(new ReleaseRefused(`buf breaking could not run: ${error!.message}`));
      resolve({ code, output: `${stdout}${stderr}`.trim() });
    });
  });
}

/**
 * Resolves when the candidate image's contracts are wire-compatible with the live image's (buf's
 * rules in proto/buf.yaml); rejects with ReleaseRefused holding buf's findings otherwise.
 */
export async function checkContracts(check: ContractCheck & { readonly root: string }): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-release-gate-"));
  try {
    const live = await extractContracts(check.live, dir, "live", check.pull);
    const candidate = await extractContracts(check.candidate, dir, "candidate", check.pull);
    const { code, output } = await bufBreaking([
      "breaking",
      candidate,
      "--against",
      live,
      "--config",
      join(check.root, "proto", "buf.yaml"),
      ...check.paths.flatMap((path) => ["--path", path]),
    ]);
    if (code === 0) return;
    // buf exits 100 when it found breaking changes, and otherwise when it could not compare.
    const message =
      code === 100
        ? `the contracts of ${check.candidate} break those of the live ${check.live} (buf breaking)`
        : `buf breaking could not compare ${check.candidate} with ${check.live} (exit ${code})`;
    throw new ReleaseRefused(message, output);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
