export {
  type PostgresServer,
  postgresSkipReason,
  postgresUnavailable,
  type StartPostgresOptions,
  startPostgres,
  stopPostgresIn,
  type TestPostgres,
  testPostgres,
} from "./postgres-test-server.js";
export { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";
export { makeTestCa, type TestCa } from "./test-ca.js";
