// What of the data folder `pnpm start` cannot use, said in one line (a folder not writable, a file
// where a folder should be, log files left to root by an earlier sudo), and the services' log
// files, all opened before any service is started.
import { createWriteStream, openSync, type WriteStream } from "node:fs";
import { join, relative } from "node:path";
import { type Logger, redactText } from "@loopguard/tool-sdk";

/** The line for a file system error of the start, naming the file under the data folder; undefined for any other error. */
export function cannotUse(error: unknown, dataDir: string): string | undefined {
  const { code, path, message } = error as NodeJS.ErrnoException;
  if (typeof code !== "string" || typeof path !== "string") return undefined;
  // Node's message is "CODE: the system's words, syscall 'path'".
  const reason = `${/^[A-Z]+: ([^,]+),/.exec(message)?.[1] ?? "error"} (${code})`;
  const inside = relative(dataDir, path);
  if (inside.startsWith("..")) return `cannot use ${path}: ${reason}`;
  return `cannot use data folder ${dataDir}: ${inside ? `${inside}: ` : ""}${reason}`;
}

/**
 * Opens each service's log file (appending) and returns where the supervisor writes their lines: a
 * file that fails later (a full disk) is warned of once and its lines are dropped, the suite runs on.
 */
export function openServiceLogs(
  logDir: string,
  services: readonly string[],
  log: Logger,
): (service: string, line: string) => void {
  const files = new Map<string, WriteStream>();
  for (const service of services) {
    const path = join(logDir, `${service}.log`);
    const file = createWriteStream(path, { fd: openSync(path, "a") });
    // The stream is destroyed by its error: its lines are not written after it.
    file.on("error", (error: NodeJS.ErrnoException) =>
      log.warn("a service's log file cannot be written; its lines are dropped", {
        service,
        code: error.code,
        error_message: error.message,
      }),
    );
    files.set(service, file);
  }
  return (service, line) => {
    const file = files.get(service);
    // Lines from stderr (an uncaught exception's message) bypassed the services' loggers.
    if (file && !file.destroyed) file.write(`${redactText(line)}\n`);
  };
}
