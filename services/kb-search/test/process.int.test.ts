// dist/main.js as a real process: it seeds the index under LOOPGUARD_DATA_DIR (folder 0700, file
// 0600), serves, exits 0 on SIGTERM, and reuses the seeded index on the next start; a host it
// cannot listen on stops it before it binds, naming the variable. Needs `pnpm build` first.
import { spawnSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { type FaultProfileSchema, ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { checkHealth, spawnTool, TEST_AUTH_ENV, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));

async function setFaults(address: string, profile: MessageInitShape<typeof FaultProfileSchema>): Promise<void> {
  const admin = createRawClient(ToolAdminService, address, {
    token: await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] }),
  });
  try {
    await admin.setFaults({ profile });
  } finally {
    admin.close();
  }
}

describe("kb-search process", () => {
  let dataDir: string;
  let running: ServiceProcess | undefined;
  const env = () => ({ KB_SEARCH_PORT: "0", KB_SEARCH_METRICS_PORT: "0", LOOPGUARD_DATA_DIR: dataDir });

  beforeAll(() => {
    dataDir = join(mkdtempSync(join(tmpdir(), "kb-search-proc-")), "data");
  });
  afterEach(async () => {
    if (running && running.child.exitCode === null && running.child.signalCode === null) {
      running.child.kill("SIGKILL");
      await running.exited;
    }
    running = undefined;
  });
  afterAll(() => rmSync(dirname(dataDir), { recursive: true, force: true }));

  const indexReady = (proc: ServiceProcess) => proc.lines.find((line) => line.msg === "index ready");

  it("seeds a private index file, serves searches, stops cleanly on SIGTERM and reuses the index on the next start", async () => {
    running = await spawnTool(MAIN, env());
    expect(indexReady(running)).toMatchObject({ added: expect.any(Number), updated: 0, removed: 0 });
    expect(Number(indexReady(running)?.added)).toBeGreaterThanOrEqual(30);
    expect([statSync(dataDir).mode & 0o777, statSync(join(dataDir, "kb-search.db")).mode & 0o777]).toEqual([
      0o700, 0o600,
    ]);
    expect(await checkHealth(running.address)).toBe("SERVING");

    const client = createRawClient(KbSearchService, running.address, {
      token: await testToken({ subject: "test", scopes: ["kb:read"] }),
    });
    try {
      const { hits } = await client.search({ query: "refund", limit: 3 });
      expect(hits[0]?.docId).toBe("refund-policy");
    } finally {
      client.close();
    }

    running.child.kill("SIGTERM");
    expect(await running.exited).toBe(0);

    running = await spawnTool(MAIN, env());
    expect(indexReady(running)).toMatchObject({ added: 0, updated: 0, removed: 0 });
    running.child.kill("SIGTERM");
    expect(await running.exited).toBe(0);
  });

  it("drains through repeated signals: calls in flight answered, exit 0, the repeats logged and ignored", async () => {
    running = await spawnTool(MAIN, env());
    await setFaults(running.address, { addedLatencyMs: 1500, methods: ["Search"] });
    const client = createRawClient(KbSearchService, running.address, {
      token: await testToken({ subject: "test", scopes: ["kb:read"] }),
    });
    try {
      const answers = Array.from({ length: 4 }, () =>
        client.search({ query: "refund", limit: 1 }, { deadline: 10_000 }).then(
          (r) => r.hits[0]?.docId,
          (error: unknown) => String(error),
        ),
      );
      await sleep(300);
      // Ctrl-C under `pnpm start`: SIGINT from the terminal, SIGTERM from the supervisor, then another Ctrl-C.
      for (const signal of ["SIGINT", "SIGTERM", "SIGINT"] as const) {
        running.child.kill(signal);
        await sleep(100);
      }
      expect(await Promise.all(answers)).toEqual(Array.from({ length: 4 }, () => "refund-policy"));
      expect(await running.exited).toBe(0);
      expect(running.lines.filter((line) => line.msg === "already draining; signal ignored")).toHaveLength(2);
    } finally {
      client.close();
    }
  });

  it.each(["127.0.0.1 ", "http://127.0.0.1", "127.0.0.1:50061"])(
    "exits 2 before binding, one line naming KB_SEARCH_HOST, when it is %j",
    (host) => {
      const run = spawnSync(process.execPath, [MAIN], {
        env: { ...process.env, ...TEST_AUTH_ENV, ...env(), KB_SEARCH_HOST: host, OTEL_TRACES_EXPORTER: "none" },
        encoding: "utf8",
        timeout: 15_000,
      });
      expect(run.status).toBe(2);
      expect(run.stderr).toBe(
        `kb-search: configuration error: KB_SEARCH_HOST must be a host name or an IP address, without scheme or port, got "${host}"\n`,
      );
    },
  );
});
