/// <reference lib="dom" />
// The dashboard opened from a link whose #token= fragment is not valid percent-encoding (a mangled
// copy-paste): the page drops the fragment and asks for a token saying why, rather than dying blank.
// Served by the orchestrator's own HTTP route (createHttpPort) on loopback; no API behind it.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpPort } from "../src/api/http-port.js";
import { HAVE_CHROMIUM, launchChromium } from "./chromium.js";

let server: Server;
let base: string;
let browser: Browser;

beforeAll(async () => {
  const route = createHttpPort();
  server = createServer((req, res) => {
    if (!route(req, res)) res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  if (HAVE_CHROMIUM) browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await new Promise((r) => server.close(r));
});

describe.skipIf(!HAVE_CHROMIUM)("the dashboard opened from a token link", () => {
  it("with a malformed #token=: asks for a token saying the link's token is malformed, and drops the fragment", async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${base}/#token=abc%E0%A4%A`);
    await page.locator("#auth").waitFor({ state: "visible", timeout: 10_000 });
    expect(await page.locator("#auth-message").textContent()).toMatch(/^The link's token is malformed/);
    expect(new URL(page.url()).hash).toBe("");
    expect(await page.evaluate(() => sessionStorage.getItem("loopguard.token"))).toBeNull();
    expect(errors).toEqual([]);
    await page.close();
  });
});
