// What a tool's main.ts calls: read config (exit 2 on a bad one, also when `build` finds one),
// build, serve, exit cleanly on SIGTERM. Keeps every main.ts to wiring only.
import type { DescService } from "@bufbuild/protobuf";
import { describeConfig, loadToolConfig, type ToolConfig, type ToolDefaults } from "./config.js";
import { ConfigError } from "./settings.js";
import { createLogger, type Logger } from "./logger.js";
import { serveTool, type ToolDefinition, type ToolServer } from "./serve.js";
import { startTelemetry } from "./telemetry.js";

function exitOnConfigError(tool: string, error: ConfigError): never {
  process.stderr.write(`${tool}: configuration error: ${error.message}\n`);
  process.exit(2);
}

export async function runTool<S extends DescService>(
  tool: string,
  defaults: ToolDefaults,
  build: (config: ToolConfig, log: Logger) => ToolDefinition<S> | Promise<ToolDefinition<S>>,
): Promise<ToolServer> {
  startTelemetry(tool);
  let config: ToolConfig;
  try {
    config = loadToolConfig(tool, defaults);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    exitOnConfigError(tool, error);
  }
  const log = createLogger({ service: tool, level: config.logLevel });
  log.info("config", { config: describeConfig(config) });
  try {
    const definition = await build(config, log);
    return await serveTool(definition, { ...config, logger: log, exitOnSignals: true });
  } catch (error) {
    // A service's own settings (e.g. its store URL) are read in `build`: a bad one is a configuration error too.
    if (error instanceof ConfigError) exitOnConfigError(tool, error);
    log.error("failed to start", {
      error_name: error instanceof Error ? error.name : typeof error,
      error_message: error instanceof Error ? error.message : "",
    });
    process.exit(1);
  }
}
