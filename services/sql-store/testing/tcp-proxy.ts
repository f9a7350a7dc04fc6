// A TCP proxy on 127.0.0.1 that a test can cut, to stand for a network that stops answering:
// while cut, bytes in either direction are dropped and new connections are accepted but never
// answered, which is what a partition looks like to a client (no refusal, no reset, silence).
import { createServer, type Socket, connect } from "node:net";

export interface TcpProxy {
  readonly port: number;
  /** From now on nothing gets through, on open connections or new ones. */
  cut(): void;
  /** The next bytes the client sends that hold `text` still get through (a COMMIT reaches the database); then, as cut(). */
  cutAfter(text: string): void;
  /** Traffic flows again; connections that lost bytes while cut are closed. */
  restore(): void;
  close(): Promise<void>;
}

export function startTcpProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<TcpProxy> {
  let cut = false;
  let cutAfter: string | undefined;
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const server = createServer((downstream) => {
    track(downstream);
    if (cut) {
      downstream.resume();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    track(upstream);
    downstream.on("data", (chunk: Buffer) => {
      if (cut) return;
      upstream.write(chunk);
      if (cutAfter !== undefined && chunk.includes(cutAfter)) cut = true;
    });
    upstream.on("data", (chunk) => cut || downstream.write(chunk));
    downstream.on("close", () => upstream.destroy());
    upstream.on("close", () => downstream.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      resolve({
        port,
        cut: () => {
          cut = true;
        },
        cutAfter: (text) => {
          cutAfter = text;
        },
        restore: () => {
          cut = false;
          cutAfter = undefined;
          for (const socket of sockets) socket.destroy();
        },
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
