export {
  type PostgresServer,
  postgresSkipReason,
  postgresUnavailable,
  type StartPostgresOptions,
  startPostgres,
  type TestPostgres,
  testPostgres,
} from "./postgres-test-server.js";
export { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";
