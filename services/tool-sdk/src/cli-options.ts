// What the command-line tools share: a usage error (one line, exit 2), a checked number option, and
// the parsing of a command with subcommands.
import { type ParseArgsConfig, parseArgs } from "node:util";

/** parseArgs options of the tools that can print JSON: --json, and --help (-h). */
export const CLI_FLAGS = { json: { type: "boolean" }, help: { type: "boolean", short: "h" } } as const;

/** A wrong argument or a missing key: one line, exit 2. */
export class UsageError extends Error {}

/** `--name`'s value as a number within min..max (a whole one when `integer`), `fallback` when absent. */
export function numberOption(
  value: string | undefined,
  name: string,
  fallback: number,
  min: number,
  max: number,
  integer = true,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n)))
    throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} in ${min}..${max}, got "${value}"`);
  return n;
}

/**
 * `<tool> SUBCOMMAND --flag …`: the subcommand (one of `commands`) and the flags' values. --help
 * prints `usage` (exit 0); no subcommand prints it too (exit 2); an unknown subcommand or flag is
 * one line on stderr naming it, exit 2.
 */
export function subcommandArgs<Values>(
  tool: string,
  usage: string,
  commands: readonly string[],
  options: NonNullable<ParseArgsConfig["options"]>,
): { command: string; values: Values } {
  const fail = (message: string): never => {
    process.stderr.write(`${tool}: ${message}\n`);
    process.exit(2);
  };
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({ allowPositionals: true, options: { ...options, help: { type: "boolean", short: "h" } } });
  } catch (error) {
    return fail((error as Error).message);
  }
  const [command] = parsed.positionals;
  if (parsed.values.help || !command) {
    process.stdout.write(usage);
    process.exit(parsed.values.help ? 0 : 2);
  }
  if (!commands.includes(command)) fail(`unknown command "${command}"\n${usage}`);
  return { command, values: parsed.values as Values };
}
