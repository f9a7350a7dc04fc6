// The health client against real servers over loopback: a checker kept open answers check after
// check on one connection, and a server that takes the connection but never answers (a frozen
// process) fails a check at its deadline instead of holding it.
import { connect, createServer, type Server, type Socket } from "node:net";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { afterEach, expect, it } from "vitest";
import { status } from "../src/errors.js";
import { healthChecker } from "../src/health-client.js";
import { SAMPLE_HIT, startTestTool } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const clean of cleanups.splice(0).reverse()) await clean();
});

/** A TCP server on a free loopback port; its address. */
async function listen(onSocket: (socket: Socket) => void): Promise<string> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    onSocket(socket);
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  cleanups.push(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise<void>((ok) => server.close(() => ok()));
  });
  return `127.0.0.1:${(server.address() as { port: number }).port}`;
}

it("answers check after check on one connection", async () => {
  const tool = await startTestTool({
    service: KbSearchService,
    handlers: { search: async () => ({ hits: [SAMPLE_HIT] }) },
  });
  cleanups.push(() => tool.close());
  let connections = 0;
  // A relay in front of the tool, to count the connections the checker makes.
  const relay = await listen((socket) => {
    connections += 1;
    const [host, port] = tool.address.split(":");
    const upstream = connect(Number(port), host!);
    socket.pipe(upstream).pipe(socket);
    socket.on("close", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
  });
  const checker = healthChecker(relay);
  cleanups.push(() => checker.close());
  const answers = [];
  for (let i = 0; i < 5; i += 1) answers.push(await checker.check(2000));
  expect(answers).toEqual(Array(5).fill("SERVING"));
  expect(await checker.check(2000, KbSearchService.typeName)).toBe("SERVING");
  expect(connections).toBe(1);
});

it("fails a check at its deadline against a server that accepts but never answers", async () => {
  const silent = await listen(() => undefined);
  const checker = healthChecker(silent);
  cleanups.push(() => checker.close());
  const started = Date.now();
  await expect(checker.check(300)).rejects.toMatchObject({ code: status.DEADLINE_EXCEEDED });
  expect(Date.now() - started).toBeLessThan(10_000);
});
