// A local OpenAI-compatible Chat Completions server for integration tests: real HTTP on
// loopback, replies from a script, every request recorded as it arrived.
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** The raw request body. */
  readonly text: string;
  /** The parsed JSON body, or undefined when it was not JSON. `any` because tests read arbitrary wire fields. */
  readonly body: any;
}

/** A reply with control over the HTTP status and headers; a string body is sent as is. */
export interface HttpReply {
  readonly status: number;
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/** One scripted turn: a response body (sent with 200) or an HttpReply. A promise that never settles makes the server hang. */
export type ScriptedReply = (request: ReceivedRequest) => unknown | Promise<unknown>;

export interface FakeChatServer {
  /** e.g. "http://127.0.0.1:40123/v1" */
  readonly baseUrl: string;
  readonly requests: readonly ReceivedRequest[];
  close(): Promise<void>;
}

/** `script`: the replies in order, one per request; or one reply function that answers every request (many sessions at once). */
export async function startFakeChatServer(script: readonly ScriptedReply[] | ScriptedReply): Promise<FakeChatServer> {
  const requests: ReceivedRequest[] = [];
  let next = 0;

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      void (async () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        const request: ReceivedRequest = {
          method: req.method ?? "",
          path: req.url ?? "",
          headers: req.headers,
          text,
          body,
        };
        requests.push(request);

        let reply: HttpReply;
        const step = typeof script === "function" ? script : script[next++];
        if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
          reply = {
            status: 404,
            body: { error: { message: `no route ${req.method} ${req.url}`, type: "invalid_request_error" } },
          };
        } else if (step === undefined) {
          reply = {
            status: 500,
            body: { error: { message: "fake chat server: script exhausted", type: "server_error" } },
          };
        } else {
          try {
            reply = toHttpReply(await step(request));
          } catch (err) {
            reply = {
              status: 500,
              body: { error: { message: `fake chat server: ${String(err)}`, type: "server_error" } },
            };
          }
        }
        if (res.destroyed) return;
        const payload = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body ?? {});
        res.writeHead(reply.status, { "content-type": "application/json", ...reply.headers });
        res.end(payload);
      })();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    async close() {
      // Scripted hangs keep their sockets open; drop them so close() settles.
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function toHttpReply(value: unknown): HttpReply {
  if (typeof value === "object" && value !== null && typeof (value as { status?: unknown }).status === "number") {
    return value as HttpReply;
  }
  return { status: 200, body: value };
}

export interface ScriptedToolCall {
  /** Omit to send a tool call without an id, as some compatible servers do. */
  readonly id?: string;
  readonly name: string;
  /** Sent verbatim, so malformed JSON can be scripted. */
  readonly arguments: string;
}

let completionCounter = 0;

/** A chat.completion body shaped like the ones OpenAI returns. */
export function chatCompletion(reply: {
  readonly content?: string | null;
  readonly toolCalls?: readonly ScriptedToolCall[];
  readonly model?: string;
  /**
   * `null` leaves the usage object out, as some servers do. The default is near the host's count of
   * the prompts and replies here (some 600 to 1,500 tokens), as a real server's count would be: a
   * prompt reported under half the host's count or over twice it is not believed (prompt.ts believedUsage).
   */
  readonly usage?: { readonly prompt_tokens: number; readonly completion_tokens: number } | null;
  readonly finishReason?: string;
}): Record<string, unknown> {
  const toolCalls = reply.toolCalls ?? [];
  const usage = reply.usage === undefined ? { prompt_tokens: 1000, completion_tokens: 40 } : reply.usage;
  completionCounter += 1;
  return {
    id: `chatcmpl-fake${String(completionCounter).padStart(6, "0")}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: reply.model ?? "fake-model",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: reply.content ?? null,
          ...(toolCalls.length > 0
            ? {
                tool_calls: toolCalls.map((call) => ({
                  ...(call.id === undefined ? {} : { id: call.id }),
                  type: "function",
                  function: { name: call.name, arguments: call.arguments },
                })),
              }
            : {}),
        },
        finish_reason: reply.finishReason ?? (toolCalls.length > 0 ? "tool_calls" : "stop"),
      },
    ],
    ...(usage === null
      ? {}
      : {
          usage: {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.prompt_tokens + usage.completion_tokens,
          },
        }),
  };
}

/** A reply asking for one tool call. */
export const toolCall = (name: string, args: string, id?: string) =>
  chatCompletion({ toolCalls: [{ ...(id ? { id } : {}), name, arguments: args }] });

/** The tool messages the model was sent in `request`, by tool_call_id. */
export function toolResults(
  request: ReceivedRequest,
): Record<string, { ok: boolean; error?: { code: string; message: string } }> {
  const out: Record<string, { ok: boolean; error?: { code: string; message: string } }> = {};
  for (const m of request.body.messages as { role: string; tool_call_id?: string; content: string }[]) {
    if (m.role === "tool" && m.tool_call_id) out[m.tool_call_id] = JSON.parse(m.content);
  }
  return out;
}
