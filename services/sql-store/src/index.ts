export { type Migrated, openMigratedPostgres, openMigratedSqlite } from "./open.js";
export {
  type Migration,
  MIGRATIONS_TABLE,
  migratePostgres,
  migrateSqlite,
  type PostgresMigrateOptions,
  type PostgresMigration,
  type SqliteMigration,
} from "./migrate.js";
export {
  createPostgresPool,
  inTransaction,
  isPostgresUnavailable,
  POSTGRES_DEFAULTS,
  type PostgresOptions,
  postgresClientConfig,
  type TransactionOptions,
} from "./postgres.js";
export { explainPostgresTlsError, PostgresTlsError, postgresTlsProblem } from "./postgres-tls.js";
export {
  ensurePrivateDir,
  isSqliteUnavailable,
  openSqlite,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  preparePrivateSqliteFile,
  type SqliteOptions,
} from "./sqlite.js";
export { MAX_STORE_POOL_SIZE, seedDemo, storePoolSize } from "./store-env.js";
export { describeStoreLocation, parseStoreUrl, redactStoreUrl, type StoreLocation, StoreUrlError } from "./store-url.js";
