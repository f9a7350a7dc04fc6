// How every service starts: telemetry first, config (exit 2 on a bad one, also when `build` finds
// one, before anything binds), build, serve, exit cleanly on SIGTERM. Keeps every main.ts to wiring.
import type { DescService } from "@bufbuild/protobuf";
import { describeConfig, loadToolConfig, type ToolConfig, type ToolDefaults } from "./config.js";
import { createLogger, type Logger } from "./logger.js";
import { type ServeOptions, serveTool, type ToolDefinition, type ToolServer } from "./serve.js";
import { ConfigError } from "./settings.js";
import { startTelemetry, type TelemetryOptions } from "./telemetry.js";

function exitOnConfigError(tool: string, error: ConfigError): never {
  process.stderr.write(`${tool}: configuration error: ${error.message}\n`);
  process.exit(2);
}

/** What a service's `build` returns: its definition, and what serving it needs besides the config. */
export interface BuiltService<S extends DescService> {
  readonly definition: ToolDefinition<S>;
  /** Serving options beyond the config's: the service's own metrics, Connect, extra HTTP routes. */
  readonly serve?: Partial<Pick<ServeOptions, "metrics" | "connect" | "http">>;
  /** Called once the server is listening (background work that needs it up). */
  readonly onServing?: () => void;
}

export interface ServiceStart<C extends ToolConfig, S extends DescService> {
  /** Reads the service's config from the environment; may throw ConfigError. */
  readonly load: () => C;
  /** The config as it may be logged (default: describeConfig). */
  readonly describe?: (config: C) => Record<string, unknown>;
  readonly telemetry?: TelemetryOptions;
  /** Each log line, besides stdout (e.g. an in-memory tail). */
  readonly logLine?: (line: string) => void;
  readonly build: (config: C, log: Logger) => BuiltService<S> | Promise<BuiltService<S>>;
}

export async function runService<C extends ToolConfig, S extends DescService>(
  tool: string,
  start: ServiceStart<C, S>,
): Promise<ToolServer> {
  startTelemetry(tool, process.env, start.telemetry);
  let config: C;
  try {
    config = start.load();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    exitOnConfigError(tool, error);
  }
  const logLine = start.logLine;
  const write = logLine
    ? (line: string) => {
        process.stdout.write(`${line}\n`);
        logLine(line);
      }
    : undefined;
  const log = createLogger({ service: tool, level: config.logLevel, ...(write ? { write } : {}) });
  log.info("config", { config: (start.describe ?? describeConfig)(config) });
  try {
    const built = await start.build(config, log);
    const server = await serveTool(built.definition, { ...config, ...built.serve, logger: log, exitOnSignals: true });
    built.onServing?.();
    return server;
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

/** A tool with the common config only: `build` returns its definition. */
export function runTool<S extends DescService>(
  tool: string,
  defaults: ToolDefaults,
  build: (config: ToolConfig, log: Logger) => ToolDefinition<S> | Promise<ToolDefinition<S>>,
): Promise<ToolServer> {
  return runService(tool, {
    load: () => loadToolConfig(tool, defaults),
    build: async (config, log) => ({ definition: await build(config, log) }),
  });
}
