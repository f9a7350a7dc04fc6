// A command run to its end as a child process, its exit code and output collected. Asynchronous,
// so the test worker keeps answering vitest while the command runs (a worker blocked for a minute
// is reported as an error: "Timeout calling onTaskUpdate").
import { execFile } from "node:child_process";

export interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  readonly timeoutMs: number;
  readonly cwd?: string;
  readonly env?: NodeJS.ProcessEnv;
}

/** Exit code 1 when the command could not start or was killed (e.g. by the timeout). */
export function runProcess(
  command: string,
  args: readonly string[],
  { timeoutMs, cwd, env }: RunOptions,
): Promise<Run> {
  return new Promise((done) => {
    execFile(command, args, { cwd, env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      done({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, stdout, stderr });
    });
  });
}
