// The file-level hooks a PostgreSQL test file registers, in their own entry point: vitest is only
// imported by the test files that use them, never by the scripts that start a server themselves.
import { afterAll, beforeAll } from "vitest";
import { type StartPostgresOptions, type TestPostgres, testPostgres } from "./postgres-test-server.js";

/** testPostgres whose server starts before the file's tests and stops after them, unless they skip. */
export function usePostgres(name: string, options: StartPostgresOptions = {}): TestPostgres {
  const postgres = testPostgres(name, options);
  if (!postgres.skip) {
    beforeAll(postgres.start, 120_000);
    afterAll(postgres.stop, 60_000);
  }
  return postgres;
}
