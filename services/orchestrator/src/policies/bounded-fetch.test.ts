import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedFetch, ResponseTooLargeError } from "./bounded-fetch.js";

let server: Server;
let base = "";
beforeAll(async () => {
  // "/announced/N" declares its length; "/chunked/N" streams in 64 KiB chunks with no length.
  server = createServer((req, res) => {
    const [, mode, size] = (req.url ?? "").split("/");
    const body = Buffer.alloc(Number(size), "a");
    if (mode === "announced") return void res.writeHead(200, { "content-length": String(body.length) }).end(body);
    res.writeHead(200);
    for (let at = 0; at < body.length; at += 65_536) res.write(body.subarray(at, at + 65_536));
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe("boundedFetch", () => {
  const fetch = boundedFetch(100_000);

  it("passes a reply within the bound through whole", async () => {
    expect((await (await fetch(`${base}/chunked/100000`)).text()).length).toBe(100_000);
    expect((await (await fetch(`${base}/announced/100000`)).text()).length).toBe(100_000);
  });

  it("refuses a reply that announces more than the bound before reading it", async () => {
    await expect(fetch(`${base}/announced/5000000`)).rejects.toBeInstanceOf(ResponseTooLargeError);
  });

  it("stops reading a streamed reply once it passes the bound", async () => {
    const response = await fetch(`${base}/chunked/5000000`);
    await expect(response.text()).rejects.toBeInstanceOf(ResponseTooLargeError);
  });
});
