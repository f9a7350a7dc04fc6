// The MCP tool list: the orchestrator's registry as it derives it from the contracts (names,
// descriptions, JSON input schemas), with MCP's behaviour hints read from each method's effect.
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import type { RegisteredTool } from "@loopguard/orchestrator/tool-registry";
import { Effect } from "@loopguard/tool-sdk";

export function mcpTool(tool: RegisteredTool): Tool {
  const readOnly = tool.effect === Effect.READ_ONLY;
  const irreversible = tool.effect === Effect.IRREVERSIBLE_EXTERNAL;
  return {
    name: tool.name,
    description: tool.spec.description,
    inputSchema: tool.spec.parameters as Tool["inputSchema"],
    annotations: {
      readOnlyHint: readOnly,
      destructiveHint: irreversible,
      // A read, or a write the contract marks idempotent; an irreversible call is made once per
      // session, and each MCP call is a new session.
      idempotentHint: readOnly || tool.effect === Effect.IDEMPOTENT_WRITE,
      // Every tool is one of the suite's own services, reached only through the orchestrator.
      openWorldHint: false,
    },
  };
}
