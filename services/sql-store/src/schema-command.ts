// The schema commands every stateful service's main.ts answers before it would serve, the same
// for each (the images' entrypoint is the service's main, so `docker run IMAGE migrate` and a
// Job's `args: [migrate]` reach them):
//   migrate                          apply pending migrations under the store's lock; exit 0 when current
//   wait-for-schema [--timeout S]    apply nothing; exit 0 once another (the migrate Job) made the
//                                    schema current, 1 at the timeout or on a schema this build cannot run on
//   migrations                       print this build's migrations and their declarations as JSON
//                                    (images carry the output; `pnpm release` compares two images')
// Exit 2 on a configuration error, as when serving.
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { declarationOf, type MigrationDeclaration } from "./migrate.js";
import { migrateStore } from "./open.js";
import { isPostgresUnavailable } from "./postgres.js";
import { assessStore, requireCurrent, SchemaNotCurrentError, type StoreSchema, schemaProblem } from "./schema.js";
import { isSqliteUnavailable } from "./sqlite.js";
import { describeStoreLocation, type StoreLocation } from "./store-url.js";

export const SCHEMA_COMMANDS = ["migrate", "wait-for-schema", "migrations"] as const;
export type SchemaCommand = (typeof SCHEMA_COMMANDS)[number];

/** What `<service> migrations` prints: per database, the migrations in order with their declarations. */
export interface MigrationListing {
  readonly store: string;
  readonly sqlite: readonly MigrationDeclaration[];
  readonly postgres: readonly MigrationDeclaration[];
}

export function listingOf(schema: StoreSchema): MigrationListing {
  return {
    store: schema.store,
    sqlite: schema.sqlite.map(declarationOf),
    postgres: schema.postgres.map(declarationOf),
  };
}

/** The schema command `argv` (process.argv.slice(2)) names, or undefined to serve. */
export function schemaCommandOf(argv: readonly string[]): SchemaCommand | undefined {
  return SCHEMA_COMMANDS.find((c) => c === argv[0]);
}

export interface SchemaCommandOptions {
  readonly service: string;
  readonly command: SchemaCommand;
  readonly argv: readonly string[];
  /** Where the store is and what it needs; may throw the service's configuration error. */
  readonly load: () => { readonly location: StoreLocation; readonly schema: StoreSchema };
  /** What `migrations` prints (needs no configuration). */
  readonly listing: StoreSchema;
  readonly isConfigError: (error: unknown) => boolean;
  readonly out?: (line: string) => void;
  readonly err?: (line: string) => void;
}

const POLL_MS = 1000;
export const DEFAULT_SCHEMA_WAIT_SECONDS = 600;

const unavailable = (error: unknown) => isPostgresUnavailable(error) || isSqliteUnavailable(error);

/** Runs a schema command and resolves with the process's exit code. */
export async function runSchemaCommand(options: SchemaCommandOptions): Promise<number> {
  const out = options.out ?? ((line) => process.stdout.write(`${line}\n`));
  const err = options.err ?? ((line) => process.stderr.write(`${line}\n`));
  const { service, command } = options;
  if (command === "migrations") {
    out(JSON.stringify(listingOf(options.listing)));
    return 0;
  }
  let timeoutSeconds = DEFAULT_SCHEMA_WAIT_SECONDS;
  let store: ReturnType<SchemaCommandOptions["load"]>;
  try {
    const { values } = parseArgs({
      args: [...options.argv.slice(1)],
      options: { timeout: { type: "string" } },
      strict: true,
    });
    if (values.timeout !== undefined) {
      if (command !== "wait-for-schema") throw new Error("--timeout belongs to wait-for-schema");
      timeoutSeconds = Number(values.timeout);
      if (!Number.isInteger(timeoutSeconds) || timeoutSeconds < 1)
        throw new Error(`--timeout wants whole seconds, got "${values.timeout}"`);
    }
    store = options.load();
  } catch (error) {
    err(`${service}: ${options.isConfigError(error) ? "configuration error" : "usage"}: ${(error as Error).message}`);
    return 2;
  }
  const where = describeStoreLocation(store.location);
  try {
    if (command === "migrate") {
      const started = performance.now();
      const applied = await migrateStore(store.location, store.schema);
      // A second run waits for the first one's lock, then finds nothing pending.
      requireCurrent(await assessStore(store.location, store.schema));
      const took = `${((performance.now() - started) / 1000).toFixed(1)} s`;
      out(
        applied.length > 0
          ? `${service}: applied ${applied.length} migration(s) to ${where} in ${took}: ${applied.join(", ")}; the schema is current`
          : `${service}: the schema at ${where} is current (nothing to apply)`,
      );
      return 0;
    }
    const deadline = Date.now() + timeoutSeconds * 1000;
    let last = "";
    for (;;) {
      try {
        const assessment = await assessStore(store.location, store.schema);
        const message = schemaProblem(assessment);
        if (message === undefined) {
          out(`${service}: the schema at ${where} is current`);
          return 0;
        }
        // A later release's contract migration does not go away by waiting.
        if (assessment.incompatible.length > 0) requireCurrent(assessment);
        if (message !== last) err(`${service}: waiting: ${message}`);
        last = message;
      } catch (error) {
        if (!unavailable(error)) throw error;
        const message = `the store at ${where} is unavailable (${(error as Error).message})`;
        if (message !== last) err(`${service}: waiting: ${message}`);
        last = message;
      }
      if (Date.now() >= deadline) {
        err(`${service}: the schema at ${where} did not become current within ${timeoutSeconds} s: ${last}`);
        return 1;
      }
      await sleep(POLL_MS);
    }
  } catch (error) {
    const message =
      error instanceof SchemaNotCurrentError ? error.message : `${(error as Error).name}: ${(error as Error).message}`;
    err(`${service}: ${command} failed at ${where}: ${message}`);
    return 1;
  }
}

/** Runs a schema command, then exits with its code once what it printed is written (a pipe is asynchronous). */
export async function runSchemaCommandAndExit(options: SchemaCommandOptions): Promise<never> {
  const code = await runSchemaCommand(options);
  await Promise.all(
    [process.stdout, process.stderr].map((stream) => new Promise<void>((resolve) => stream.write("", () => resolve()))),
  );
  process.exit(code);
}

/** Runs the schema command `argv` names and exits; returns when none is named, so the service serves. */
export async function runSchemaCommandIfNamed(
  options: Omit<SchemaCommandOptions, "command" | "argv">,
  argv: readonly string[] = process.argv.slice(2),
): Promise<void> {
  const command = schemaCommandOf(argv);
  if (command) await runSchemaCommandAndExit({ ...options, command, argv });
}
