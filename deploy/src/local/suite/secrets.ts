// The local key and secret files a pod mounts, staged so that only the images' user can read them.
import { chmodSync, chownSync, copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

/** The numeric user of the images (deploy/docker/Dockerfile); staged secrets are made readable to it. */
const IMAGE_UID = 10001;
/** Where a pod finds the file a `…_FILE` variable of the local suite names (keys, secrets). */
export const SECRETS_TARGET = "/run/secrets/loopguard";

/**
 * A copy of a local key or secret file that only the images' user can read: the original is
 * the operator's (private keys are 0600), and a bind mount keeps a file's owner.
 */
export function stageSecret(stateDir: string, name: string, source: string): string {
  const dir = join(stateDir, "secrets");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const staged = join(dir, name);
  rmSync(staged, { force: true });
  copyFileSync(source, staged);
  if (process.getuid?.() === 0) {
    chownSync(staged, IMAGE_UID, IMAGE_UID);
    chmodSync(staged, 0o400);
  } else {
    // Not root: the copy cannot change owner, so it is readable to all, inside a 0700 folder.
    chmodSync(staged, 0o444);
  }
  return staged;
}

/** A read-only bind mount of a staged secret at `target`. */
export function secretMount(stateDir: string, name: string, source: string, target: string): string[] {
  return ["--mount", `type=bind,src=${stageSecret(stateDir, name, source)},dst=${target},readonly`];
}
