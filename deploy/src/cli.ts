// How every deploy command line ends: its main's number is the exit code, a wrong argument
// (UsageError) exits 2 and anything else 1, each with one line `<name>: <message>` on stderr.

/** A wrong argument: the command exits 2 and says what to type instead. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** Turns an error into the line the command prints; the default is its message. */
export type DescribeError = (error: Error) => string;

export function exitCodeOf(error: unknown): number {
  return error instanceof UsageError ? 2 : 1;
}

/** Runs `main` and exits with the code it returns, or with exitCodeOf the error it throws. */
export function runCli(
  name: string,
  main: () => Promise<number> | number,
  describe: DescribeError = (error) => error.message,
): void {
  Promise.resolve()
    .then(main)
    .then(
      (code) => process.exit(code),
      (error: unknown) => {
        const line = error instanceof Error ? describe(error) : String(error);
        process.stderr.write(`${name}: ${line}\n`);
        process.exit(exitCodeOf(error));
      },
    );
}
