// Real billing processes verifying the local suite's keys (as `pnpm start` makes them) from a real
// JWKS file, changed by the real `pnpm keys` and used through the real `pnpm mint-token`: a key
// signs only for its own subject and scopes, break-glass is off until BILLING_BREAK_GLASS=on (and
// then takes only a token `pnpm mint-token` could make: 15 minutes, a reason of 200 characters at
// most), and a revoked key stops verifying within about a second, without a restart.
import { execFile } from "node:child_process";
import { sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { refusal, type ServiceProcess } from "@loopguard/test-kit";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import {
  BREAK_GLASS_MAX_REASON_CHARS,
  BREAK_GLASS_MAX_TTL_SECONDS,
  CallError,
  createRawClient,
  ensureLocalKeys,
  type LocalKeys,
  mintToken,
  personKey,
  readSigningKey,
  status,
} from "@loopguard/tool-sdk";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import Database from "better-sqlite3";
import { refundOf } from "./billing-fixture.js";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const TOOL_SDK_CLI = fileURLToPath(new URL("../../tool-sdk/dist/cli/", import.meta.url));

let dir: string;
let keys: LocalKeys;
const processes: ServiceProcess[] = [];

function cli(
  name: "keys" | "mint-token",
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(TOOL_SDK_CLI, `${name}.js`), ...args],
      { env: { ...process.env, LOOPGUARD_DATA_DIR: dir }, timeout: 30_000 },
      (error, stdout, stderr) =>
        done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function billing(env: Record<string, string> = {}): Promise<ServiceProcess> {
  const proc = await spawnTool(MAIN, {
    BILLING_PORT: "0",
    BILLING_METRICS_PORT: "0",
    LOOPGUARD_DATA_DIR: mkdtempSync(join(dir, "billing-")),
    LOOPGUARD_JWKS: "",
    LOOPGUARD_JWKS_FILE: keys.jwks,
    ...env,
  });
  processes.push(proc);
  return proc;
}

async function call<T>(
  address: string,
  token: string,
  run: (client: ReturnType<typeof createRawClient<typeof BillingService>>) => Promise<T>,
): Promise<T> {
  const client = createRawClient(BillingService, address, { token });
  try {
    return await run(client);
  } finally {
    client.close();
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "loopguard-identities-"));
  keys = ensureLocalKeys(dir);
  const made = await cli(
    "keys",
    "new",
    "--kid",
    "glass-alice",
    "--role",
    "break-glass",
    "--subject",
    "alice",
    "--scope",
    "billing:refund",
    "--private-out",
    join(keys.dir, "alice-glass.jwk"),
    "--jwks",
    keys.jwks,
  );
  expect(made.stderr).toBe("");
});
afterAll(async () => {
  for (const p of processes) {
    p.child.kill("SIGKILL");
    await p.exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

const refund = refundOf("ord_DEMO00000002", 100n, "identities-glass-0001");

describe("keys bound to who may use them", () => {
  it("refuses a person's token that claims another subject, naming the key's own", async () => {
    const proc = await billing();
    const { key } = personKey({ LOOPGUARD_DATA_DIR: dir }, "operator");
    const forged = await mintToken(key, { subject: "approver", audience: "billing", scopes: ["billing:read"] });
    const error = await refusal(
      call(proc.address, forged, (c) => c.getOrder({ orderId: "ord_DEMO00000001" })),
      CallError,
    );
    expect([status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
    expect(error.message).toMatch(/may sign only for subject "operator", not "approver"/);
    const honest = await mintToken(key, { subject: "operator", audience: "billing", scopes: ["billing:read"] });
    expect((await call(proc.address, honest, (c) => c.getOrder({ orderId: "ord_DEMO00000001" }))).order?.orderId).toBe(
      "ord_DEMO00000001",
    );
  });

  it("refuses a token carrying a scope beyond its key's (the operator minting billing:refund by hand)", async () => {
    const proc = await billing();
    const { key } = personKey({ LOOPGUARD_DATA_DIR: dir }, "operator");
    const beyond = await mintToken(key, { subject: "operator", audience: "billing", scopes: ["billing:refund"] });
    const error = await refusal(
      call(proc.address, beyond, (c) => c.refund({ ...refund, idempotencyKey: "identities-beyond-0001" })),
      CallError,
    );
    expect([status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
    expect(error.message).toMatch(/may not sign scope "billing:refund"/);
  });

  it("refuses a break-glass token while break-glass is off (the default), and takes it, with its reason, where BILLING_BREAK_GLASS=on", async () => {
    const minted = await cli(
      "mint-token",
      "--as",
      "alice-glass",
      "--break-glass",
      "--reason",
      "ledger repair INC-42",
      "--scope",
      "billing:refund",
    );
    expect(minted.stderr).toBe("");
    const token = minted.stdout.trim();
    const off = await billing();
    const refused = await refusal(
      call(off.address, token, (c) => c.refund(refund)),
      CallError,
    );
    expect([status[refused.code], refused.reason]).toEqual(["PERMISSION_DENIED", "CREDENTIAL_NOT_BOUND"]);
    expect(refused.message).toMatch(/BILLING_BREAK_GLASS=on/);

    const ledgerDir = mkdtempSync(join(dir, "billing-glass-"));
    const on = await billing({ BILLING_BREAK_GLASS: "on", LOOPGUARD_DATA_DIR: ledgerDir });
    expect(on.lines.find((l) => l.msg === "config")).toMatchObject({ config: { breakGlass: true } });
    // A person repairing the ledger sets no bound: the bound is the orchestrator's, and only it must send one.
    const response = await call(on.address, token, (c) => c.refund({ ...refund, maxRefundedTotalCents: 0n }));
    expect(response.replayed).toBe(false);
    expect(response.refund?.amountCents).toBe(100n);
    // Audited in the ledger, with the refund: who, with which key, and why.
    const ledger = new Database(join(ledgerDir, "billing.db"), { readonly: true });
    try {
      expect(ledger.prepare("SELECT refund_id, subject, key_id, reason FROM break_glass_refunds").all()).toEqual([
        {
          refund_id: response.refund?.refundId,
          subject: "alice",
          key_id: "glass-alice",
          reason: "ledger repair INC-42",
        },
      ]);
    } finally {
      ledger.close();
    }
    await vi.waitFor(
      () =>
        expect(on.lines.find((l) => l.msg === "break-glass refund")).toMatchObject({
          caller: "alice",
          order_id: "ord_DEMO00000002",
        }),
      { timeout: 2000 },
    );
  });

  it("with break-glass on, refuses a hand-signed break-glass token `pnpm mint-token` would not make: too long-lived, issued in the future, a reason over 200 characters", async () => {
    const tooLong = await cli(
      "mint-token",
      "--as",
      "alice-glass",
      "--break-glass",
      "--reason",
      "INC-42",
      "--ttl",
      String(BREAK_GLASS_MAX_TTL_SECONDS + 1),
      "--scope",
      "billing:refund",
    );
    expect(tooLong.stderr).toMatch(/--ttl must be 1..900 seconds for a break-glass token/);
    // What anyone holding the break-glass key can sign without the CLI.
    const { key } = personKey({ LOOPGUARD_DATA_DIR: dir }, "alice-glass");
    const part = (value: object) => Buffer.from(JSON.stringify(value)).toString("base64url");
    const signed = (iat: number, exp: number, why = "INC-42") => {
      const claims = { iss: "loopguard", sub: "alice", aud: "billing", scope: "billing:refund", why, iat, exp };
      const input = `${part({ alg: "EdDSA", kid: key.kid, typ: "JWT" })}.${part(claims)}`;
      return `${input}.${sign(null, Buffer.from(input), key.key).toString("base64url")}`;
    };
    const now = Math.floor(Date.now() / 1000);
    const year = 365 * 86_400;
    const on = await billing({ BILLING_BREAK_GLASS: "on" });
    for (const [token, why] of [
      [signed(now, now + year), /lives at most 900 s; this one 31536000 s/],
      [signed(now + year - 900, now + year), /must say when it was issued \(iat\), and not later than now/],
      [signed(now, now + 600, "x".repeat(BREAK_GLASS_MAX_REASON_CHARS + 1)), /reason is at most 200 characters/],
    ] as const) {
      const refused = await refusal(
        call(on.address, token, (c) => c.refund(refundOf("ord_DEMO00000002", 100n, "identities-glass-0002"))),
        CallError,
      );
      expect([status[refused.code], refused.reason]).toEqual(["PERMISSION_DENIED", "CREDENTIAL_NOT_BOUND"]);
      expect(refused.message).toMatch(why);
    }
    // Nothing was refunded: the same refund under a token as the CLI makes it goes through once.
    const fine = signed(now, now + BREAK_GLASS_MAX_TTL_SECONDS, "x".repeat(BREAK_GLASS_MAX_REASON_CHARS));
    const response = await call(on.address, fine, (c) =>
      c.refund(refundOf("ord_DEMO00000002", 100n, "identities-glass-0002")),
    );
    expect([response.replayed, response.refund?.amountCents]).toEqual([false, 100n]);
  });

  it("stops trusting a key revoked with `pnpm keys revoke` within about a second, without a restart", async () => {
    const proc = await billing();
    const { key } = personKey({ LOOPGUARD_DATA_DIR: dir }, "operator");
    const token = await mintToken(key, { subject: "operator", audience: "billing", scopes: ["billing:read"] });
    const read = () => call(proc.address, token, (c) => c.getOrder({ orderId: "ord_DEMO00000001" }));
    expect((await read()).order?.orderId).toBe("ord_DEMO00000001");

    const revoked = await cli("keys", "revoke", "--kid", key.kid, "--jwks", keys.jwks);
    expect(revoked.stderr).toBe("");
    const started = Date.now();
    let error: CallError | undefined;
    while (!error && Date.now() - started < 5000) {
      error = await read().then(
        () => undefined,
        (e: unknown) => e as CallError,
      );
      if (!error) await new Promise((r) => setTimeout(r, 50));
    }
    expect(error && [status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(error?.message).toMatch(/not trusted \(unknown or revoked\)/);
    expect(JSON.parse(readFileSync(keys.jwks, "utf8")).revoked).toEqual([key.kid]);
    // The log line travels through a pipe and may arrive after the refusal it caused.
    await vi.waitFor(() => expect(proc.lines.some((l) => l.msg === "trusted keys reloaded")).toBe(true), {
      timeout: 2000,
    });
    // Only the revoked key went: the orchestrator's still verifies.
    const orchestrator = await mintToken(readSigningKey({ LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator }), {
      subject: "session:s1",
      audience: "billing",
      scopes: ["billing:read"],
    });
    expect(
      (await call(proc.address, orchestrator, (c) => c.getOrder({ orderId: "ord_DEMO00000001" }))).order?.orderId,
    ).toBe("ord_DEMO00000001");
  });
});
