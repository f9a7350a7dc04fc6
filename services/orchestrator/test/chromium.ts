// The system's headless Chromium for the dashboard's browser tests, launched one way for all of them.
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

const CHROMIUM = "/usr/bin/chromium";

export const HAVE_CHROMIUM = existsSync(CHROMIUM);
if (!HAVE_CHROMIUM)
  console.warn(
    `dashboard browser tests skipped: ${CHROMIUM} is missing (install it with \`apt-get install -y chromium\`)`,
  );

/** Headless, without a sandbox, GPU or background traffic: the same browser in every run. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--disable-quic",
    ],
  });
}
