// A model that holds its answers: an OpenAI-compatible Chat Completions endpoint on loopback (the
// wire protocol the `openai` policy speaks) that answers no request until the bench releases it,
// so a session waits on the model for as long as the bench wants, on a real HTTP request.
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface HeldModel {
  /** e.g. "http://127.0.0.1:40123/v1" */
  readonly baseUrl: string;
  /** Requests waiting for their answer. */
  readonly held: number;
  /**
   * Answers up to `n` held requests (oldest first) with a final answer; returns, per answer, the
   * first match of `tag` in its request (the bench puts a session's own mark in its goal) and when
   * the answer was written.
   */
  release(n: number): { readonly tag: string; readonly at: number }[];
  close(): Promise<void>;
}

const ANSWER = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 0,
  model: "bench-held",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "Refunds go back to the original payment method. Confidence: 0.9" },
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 100, completion_tokens: 12, total_tokens: 112 },
});

/** Whether the caller still waits: a request it gave up on (its socket closed) has nobody to answer. */
const open = (res: ServerResponse) => !res.destroyed && res.socket !== null && !res.socket.destroyed;

export async function startHeldModel(tag: RegExp): Promise<HeldModel> {
  const held: { tag: string; res: ServerResponse }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/chat/completions") return void res.writeHead(404).end();
      held.push({ tag: tag.exec(Buffer.concat(chunks).toString("utf8"))?.[0] ?? "", res });
    });
  });
  // Thousands of requests wait at once, each on its own connection, for as long as the bench runs.
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    get held() {
      return held.filter(({ res }) => open(res)).length;
    },
    release(n) {
      const answered: { tag: string; at: number }[] = [];
      while (answered.length < n && held.length > 0) {
        const { tag, res } = held.shift()!;
        if (!open(res)) continue;
        res.writeHead(200, { "content-type": "application/json" }).end(ANSWER);
        answered.push({ tag, at: performance.now() });
      }
      return answered;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
