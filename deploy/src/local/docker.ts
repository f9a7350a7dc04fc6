// The docker CLI as the images and containers commands use it: one place that runs it, turns a
// failure into one readable line, and knows the legacy builder is the one every client here has
// (Debian's docker.io 20.10 engine; newer CLIs need the buildx plugin for BuildKit).
import { execFile, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";

export class DockerError extends Error {
  override readonly name = "DockerError";
}

/** Runs `docker …` and resolves with its stdout; rejects with DockerError naming the command and its stderr. */
export function docker(args: readonly string[], options: { timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      "docker",
      args,
      { maxBuffer: 64 * 1024 * 1024, timeout: options.timeoutMs ?? 120_000 },
      (error, stdout, stderr) => {
        if (!error) return resolve(stdout);
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOENT") return reject(new DockerError("docker is not installed (apt-get install docker.io)"));
        const detail = (stderr || error.message).trim().split("\n").slice(-3).join(" | ");
        reject(new DockerError(`docker ${args.slice(0, 2).join(" ")}: ${detail}`));
      },
    );
  });
}

/** Fails with one clear line when no Docker engine answers. */
export async function requireDockerEngine(): Promise<void> {
  try {
    await docker(["info", "--format", "{{.ServerVersion}}"], { timeoutMs: 20_000 });
  } catch (error) {
    throw new DockerError(`no Docker engine answers (${(error as Error).message}); start dockerd`);
  }
}

export async function imageExists(reference: string): Promise<boolean> {
  return docker(["image", "inspect", "--format", "{{.Id}}", reference]).then(
    () => true,
    () => false,
  );
}

/**
 * Runs a long docker command (a build) with its output written to `logFile`; rejects with the
 * last lines of that output when it fails.
 */
export function dockerToLog(
  args: readonly string[],
  logFile: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const log = createWriteStream(logFile);
    const child = spawn("docker", args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const keep = (chunk: Buffer) => {
      log.write(chunk);
      tail = (tail + chunk.toString()).slice(-4000);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    child.once("error", (error) => reject(new DockerError(`docker: ${error.message}`)));
    child.once("close", (code) => {
      log.end();
      if (code === 0) return resolve();
      const lines = tail.trim().split("\n").slice(-12).join("\n  ");
      reject(new DockerError(`docker ${args[0]} failed (exit ${code}); last lines of ${logFile}:\n  ${lines}`));
    });
  });
}
