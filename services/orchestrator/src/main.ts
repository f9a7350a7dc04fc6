// Wiring only: a schema command (`migrate`, `wait-for-schema`, `migrations`: sql-store's
// schema-command.ts) when one is named; otherwise the tool-sdk's runService: config from the
// environment, build, serve the API and the HTTP port, start driving sessions (including every
// unfinished one), drain on SIGTERM.
import { parseStoreUrl, runSchemaCommandIfNamed } from "@loopguard/sql-store";
import { ConfigError, dataDirOf, runService } from "@loopguard/tool-sdk";
import { createHttpPort } from "./api/http-port.js";
import { LogTail } from "./api/log-tail.js";
import { describeOrchestratorConfig, loadOrchestratorConfig } from "./config.js";
import { build } from "./server.js";
import { SESSIONS_SCHEMA, storeSetting } from "./store/open-store.js";

await runSchemaCommandIfNamed({
  service: "orchestrator",
  // The store alone: migrating needs none of the keys and tool addresses serving does.
  load: () => {
    const store = storeSetting(process.env, dataDirOf());
    return { location: parseStoreUrl(store.value, store.variable, ConfigError), schema: SESSIONS_SCHEMA };
  },
  listing: SESSIONS_SCHEMA,
  isConfigError: (error) => error instanceof ConfigError,
});

// The dashboard's session panel shows each session's last log lines, so they are kept in memory too.
const logTail = new LogTail();
await runService("orchestrator", {
  load: () => loadOrchestratorConfig(),
  describe: describeOrchestratorConfig,
  // Step records go to the collector's logs pipeline too (step-logs.ts).
  telemetry: { logs: true },
  logLine: (line) => logTail.write(line),
  build: async (config, log) => {
    const built = await build(config, log, { logTail });
    return {
      definition: built.definition,
      serve: { metrics: built.metrics, connect: true, http: createHttpPort({ log }) },
      // The encoding's load blocks the loop for a second or two (more on a starved node): before
      // the first claim, so that sessions taken over are not held past their leases by it.
      onServing: () =>
        setImmediate(() => {
          built.warmUp();
          built.orchestrator.start();
        }),
    };
  },
});
