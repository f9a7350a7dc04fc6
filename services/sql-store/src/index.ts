export {
  type Migrated,
  migrateStore,
  openMigratedPostgres,
  openMigratedSqlite,
  type PostgresStoreOptions,
  requireCurrentPostgres,
  type SchemaOptions,
} from "./open.js";
export {
  type AppliedMigration,
  assessSchema,
  assessStore,
  postgresLedger,
  requireCurrent,
  type SchemaAssessment,
  SchemaNotCurrentError,
  schemaProblem,
  sqliteLedger,
  type StoreSchema,
} from "./schema.js";
export {
  DEFAULT_SCHEMA_WAIT_SECONDS,
  listingOf,
  type MigrationListing,
  runSchemaCommand,
  runSchemaCommandAndExit,
  runSchemaCommandIfNamed,
  SCHEMA_COMMANDS,
  type SchemaCommand,
  type SchemaCommandOptions,
  schemaCommandOf,
} from "./schema-command.js";
// Every export of migrate.ts is public: the migration shape and the two runners.
export * from "./migrate.js";
export {
  createPostgresPool,
  inTransaction,
  isPostgresOutage,
  commitOutcomeUnknown,
  isPostgresUnavailable,
  MAX_STORE_POOL_SIZE,
  POSTGRES_DEFAULTS,
  type PostgresOptions,
  postgresClientConfig,
  postgresDriver,
  type TransactionOptions,
  unpooledClient,
} from "./postgres.js";
export type { PoolObserver, PoolUse } from "./postgres-observer.js";
export { explainPostgresTlsError, PostgresTlsError, postgresTlsProblem } from "./postgres-tls.js";
export {
  ensurePrivateDir,
  isSqliteBusy,
  isSqliteUnavailable,
  openSqlite,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  preparePrivateSqliteFile,
  retryWhileBusy,
  type SqliteOptions,
} from "./sqlite.js";
export { Turns, type TurnsOptions } from "./turns.js";
export {
  describeStoreLocation,
  parseStoreUrl,
  redactStoreUrl,
  type StoreLocation,
  StoreUrlError,
} from "./store-url.js";
