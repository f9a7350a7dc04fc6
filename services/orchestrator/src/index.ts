export * from "./session-state.js";
export * from "./session-store.js";
export { SqliteSessionStore } from "./sqlite-session-store.js";
export { PostgresSessionStore, type PostgresSessionStoreOptions } from "./postgres-session-store.js";
export { openSessionStore } from "./open-store.js";
export { redact } from "./redact.js";
export { DEFAULT_MAX_SESSIONS_PER_CALLER } from "./config.js";
export { DEFAULT_TRACE_RETENTION, type TraceRetention } from "./trace-files.js";
