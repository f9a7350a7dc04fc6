export { type PostgresServer, postgresSkipReason, postgresUnavailable, type StartPostgresOptions, startPostgres } from "./postgres-test-server.js";
export { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";
