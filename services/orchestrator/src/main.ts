// Wiring only: a schema command (`migrate`, `wait-for-schema`, `migrations`: sql-store's
// schema-command.ts) when one is named; otherwise config from the environment, build, serve the
// API and the HTTP port, start driving sessions (including every unfinished one), drain on SIGTERM.
import { join } from "node:path";
import { parseStoreUrl, runSchemaCommandAndExit, schemaCommandOf } from "@loopguard/sql-store";
import { ConfigError, createLogger, dataDirOf, serveTool, startTelemetry } from "@loopguard/tool-sdk";
import { createHttpPort } from "./api/http-port.js";
import { describeOrchestratorConfig, loadOrchestratorConfig, type OrchestratorConfig } from "./config.js";
import { LogTail } from "./api/log-tail.js";
import { SESSIONS_SCHEMA } from "./store/open-store.js";
import { build } from "./server.js";

const argv = process.argv.slice(2);
const command = schemaCommandOf(argv);
if (command) {
  await runSchemaCommandAndExit({
    service: "orchestrator",
    command,
    argv,
    // The store alone: migrating needs none of the keys and tool addresses serving does.
    load: () => ({
      location: parseStoreUrl(
        process.env.ORCHESTRATOR_STORE || `sqlite:${join(dataDirOf(), "orchestrator.db")}`,
        "ORCHESTRATOR_STORE",
        ConfigError,
      ),
      schema: SESSIONS_SCHEMA,
    }),
    listing: SESSIONS_SCHEMA,
    isConfigError: (error) => error instanceof ConfigError,
  });
}

// Step records go to the collector's logs pipeline too (step-logs.ts).
startTelemetry("orchestrator", process.env, { logs: true });
let config: OrchestratorConfig;
try {
  config = loadOrchestratorConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`orchestrator: configuration error: ${error.message}\n`);
  process.exit(2);
}
// The dashboard's session panel shows each session's last log lines, so they are kept in memory too.
const logTail = new LogTail();
const log = createLogger({
  service: "orchestrator",
  level: config.logLevel,
  write: (line) => {
    process.stdout.write(`${line}\n`);
    logTail.write(line);
  },
});
log.info("config", { config: describeOrchestratorConfig(config) });
try {
  const built = await build(config, log, { logTail });
  await serveTool(built.definition, {
    ...config,
    logger: log,
    metrics: built.metrics,
    connect: true,
    http: createHttpPort({ log }),
    exitOnSignals: true,
  });
  built.orchestrator.start();
  setImmediate(built.warmUp);
} catch (error) {
  log.error("failed to start", { error_name: (error as Error).name, error_message: (error as Error).message });
  process.exit(1);
}
