// What the model is sent: the system prompt, the tools as function specs, and the session's
// history as a Chat Completions message list that every compatible server accepts.
import type {
  ChatCompletionFunctionTool,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionMessageParam,
} from "openai/resources/chat/completions";
import { itemJson } from "../api/history-json.js";
import { CONFIDENCE_INSTRUCTIONS } from "./model-confidence.js";
import type { PolicyInput, ToolSpec } from "./policy.js";
import type { JsonObject } from "../store/session-store.js";

export const OPENAI_POLICY_SYSTEM_PROMPT =
  "You are an agent working for a platform team. Reach the goal by calling the tools you are " +
  "given: use them to look facts up and to act, one decision at a time. In your answer, " +
  "cite the document ids and refund ids it relies on. Never invent ids: use only ids that appear in the task or in tool results. " +
  "Personal data is shown as placeholders such as {{task.phone}}: pass them to tools and write " +
  "them in answers exactly as shown; the host fills in the values. A result served from a cache " +
  "is a past answer: say how old it is (its ageMs and observedAt). A degraded result means the " +
  "tool was unavailable (its note says so): say that, never that what you looked for does not exist. " +
  CONFIDENCE_INSTRUCTIONS;

export function toChatTool(tool: ToolSpec): ChatCompletionFunctionTool {
  const description = tool.unavailableUntil
    ? `${tool.description} [Unavailable now: its circuit breaker is open; no call is sent before ${tool.unavailableUntil}.]`
    : tool.description;
  return { type: "function", function: { name: tool.name, description, parameters: tool.parameters } };
}

/**
 * The user turn that states the goal and the task, kept per task object: a session shows the model
 * the same task object on every step (modelView keeps one per task), so the text is built, and its
 * tokens counted, once rather than at each step.
 */
const taskTurns = new WeakMap<JsonObject, { goal: string; text: string }>();

function taskTurn(goal: string, task: JsonObject): string {
  const kept = taskTurns.get(task);
  if (kept?.goal === goal) return kept.text;
  const text = `Goal: ${goal}\n\nTask (JSON):\n${JSON.stringify(task)}`;
  taskTurns.set(task, { goal, text });
  return text;
}

/** PolicyInput → the message list. Exported so callers can inspect or count what the model sees. */
export function toChatMessages(input: Pick<PolicyInput, "goal" | "task" | "history">): ChatCompletionMessageParam[] {
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: OPENAI_POLICY_SYSTEM_PROMPT },
    { role: "user", content: taskTurn(input.goal, input.task) },
  ];
  // Chat Completions rejects a request where an assistant tool call has no tool message
  // after it, and a tool message that answers no call. History cut short (a session stopped
  // between calls, compressed context) must not make every later request fail.
  const unanswered: { id: string; tool: string }[] = [];
  let group: ChatCompletionMessageFunctionToolCall[] | null = null;
  const closeTurn = (): void => {
    group = null;
    for (const call of unanswered.splice(0)) {
      messages.push({
        role: "tool",
        tool_call_id: call.id,
        content: JSON.stringify({
          ok: false,
          note: `no result was recorded for this ${call.tool} call; it may not have run`,
        }),
      });
    }
  };

  for (const item of input.history) {
    switch (item.kind) {
      case "call": {
        if (group === null) {
          closeTurn();
          group = [];
          messages.push({ role: "assistant", content: null, tool_calls: group });
        }
        group.push({ id: item.callId, type: "function", function: { name: item.tool, arguments: item.arguments } });
        unanswered.push({ id: item.callId, tool: item.tool });
        break;
      }
      case "observation": {
        group = null;
        // Serialised once per observation, and the same string each step: its token count is a cache hit.
        const content = itemJson(item.envelope);
        const index = unanswered.findIndex((call) => call.id === item.callId);
        if (index >= 0) {
          unanswered.splice(index, 1);
          messages.push({ role: "tool", tool_call_id: item.callId, content });
        } else {
          closeTurn();
          messages.push({ role: "user", content: `Result of call ${item.callId} (${item.tool}):\n${content}` });
        }
        break;
      }
      case "rejected_answer": {
        closeTurn();
        messages.push({ role: "assistant", content: item.text });
        messages.push({
          role: "user",
          content: `That answer was not accepted: ${item.why}\nContinue: call tools if you need more facts or actions, then answer again.`,
        });
        break;
      }
    }
  }
  closeTurn();
  return messages;
}
