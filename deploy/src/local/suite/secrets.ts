// The local key and secret files a pod mounts, staged so that only the images' user can read them.
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, copyFileSync, mkdirSync, renameSync } from "node:fs";
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
  // Pods start side by side and stage the same files: a copy renamed into place means a pod being
  // started never finds its mount's source missing while another replaces it.
  const fresh = `${staged}.${process.pid}.${randomBytes(4).toString("hex")}`;
  copyFileSync(source, fresh);
  if (process.getuid?.() === 0) {
    chownSync(fresh, IMAGE_UID, IMAGE_UID);
    chmodSync(fresh, 0o400);
  } else {
    // Not root: the copy cannot change owner, so it is readable to all, inside a 0700 folder.
    chmodSync(fresh, 0o444);
  }
  renameSync(fresh, staged);
  return staged;
}

/** A read-only bind mount of a staged secret at `target`. */
export function secretMount(stateDir: string, name: string, source: string, target: string): string[] {
  return ["--mount", `type=bind,src=${stageSecret(stateDir, name, source)},dst=${target},readonly`];
}
