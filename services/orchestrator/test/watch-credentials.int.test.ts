// A WatchSession stream lasts only as long as its caller's credential: its token is verified again
// while the stream is open (tool-sdk authStage), so a token that expires or a key revoked in the
// followed JWKS ends the stream UNAUTHENTICATED, though the session it watches still waits.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  OrchestratorService,
  SessionState,
  type WatchSessionResponse,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  type CallError,
  createRawClient,
  mintToken,
  newKeyPair,
  signingKeyFromJwk,
  status,
  withBinding,
} from "@loopguard/tool-sdk";
import { TEST_PEOPLE_KEY, TEST_PUBLIC_KEYS } from "@loopguard/tool-sdk/testing";
import { afterAll, describe, expect, it } from "vitest";
import { HIGH_RISK_CUSTOMER, startRefund, useSuite, waitForSession } from "./harness.js";

// A second key of the person "test" (who starts the harness's sessions), e.g. a laptop's.
const laptop = newKeyPair("laptop-test");
const laptopKey = signingKeyFromJwk(laptop.privateJwk);
const dir = mkdtempSync(join(tmpdir(), "watch-credentials-"));
const jwksFile = join(dir, "jwks.json");
const binding = { role: "person", subject: "test", scopes: ["sessions:read"] } as const;
writeFileSync(jwksFile, JSON.stringify({ keys: [...TEST_PUBLIC_KEYS.keys, withBinding(laptop.publicJwk, binding)] }));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const suite = useSuite({
  orchestrator: { APPROVAL_TTL_MS: "300000", LOOPGUARD_JWKS: "", LOOPGUARD_JWKS_FILE: jwksFile },
});

type Stream = AsyncIterator<WatchSessionResponse>;

/** A session waiting for an approval, watched with `token` (minted once it waits) up to the wait. */
async function watchWaiting(token: () => Promise<string>): Promise<{ id: string; stream: Stream }> {
  const id = await startRefund(suite.orch.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
  await waitForSession(suite.orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
  const api = createRawClient(OrchestratorService, suite.orch.server.address, { token: await token() });
  suite.onCleanUp(() => api.close());
  const stream = api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
  for (;;) {
    const { value, done } = await stream.next();
    if (done) throw new Error("the stream ended before the session waited");
    if (value?.event.case === "transition" && value.event.value.to === SessionState.AWAITING_APPROVAL)
      return { id, stream };
  }
}

/** Reads the stream to its end: when it ended (epoch ms) and the error it ended with. */
async function read(stream: Stream): Promise<{ at: number; error?: CallError }> {
  try {
    while (!(await stream.next()).done);
    return { at: Date.now() };
  } catch (error) {
    return { at: Date.now(), error: error as CallError };
  }
}

/** The stream's end, which must come within 10 s (without the re-check it never does: the session waits). */
async function ending(stream: Stream): Promise<{ at: number; error?: CallError }> {
  let timer: NodeJS.Timeout | undefined;
  const stillOpen = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("the stream is still open after 10 s")), 10_000);
  });
  try {
    return await Promise.race([read(stream), stillOpen]);
  } finally {
    clearTimeout(timer);
  }
}

const mint = (key: typeof laptopKey, ttlSeconds: number) =>
  mintToken(key, { subject: "test", audience: "orchestrator", scopes: ["sessions:read"], ttlSeconds });

describe("WatchSession ends with its caller's credential", () => {
  it("ends UNAUTHENTICATED when its token expires, while the session still waits", async () => {
    let expiresAt = 0;
    const { id, stream } = await watchWaiting(async () => {
      const token = await mint(TEST_PEOPLE_KEY, 2);
      expiresAt = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()).exp * 1000;
      return token;
    });
    const end = await ending(stream);
    expect(end.error?.code).toBe(status.UNAUTHENTICATED);
    expect(end.error?.message).toMatch(/the bearer token expired/);
    expect(end.at).toBeGreaterThanOrEqual(expiresAt);
    expect(end.at - expiresAt).toBeLessThan(1500);
    expect((await suite.orch.api.getSession({ sessionId: id })).session?.state).toBe(SessionState.AWAITING_APPROVAL);
    await suite.orch.api.cancelSession({ sessionId: id, reason: "test" });
  });

  it("ends UNAUTHENTICATED within 2 s of its key's revocation; a stream of a trusted key goes on", async () => {
    const { id, stream } = await watchWaiting(() => mint(laptopKey, 600));
    const trusted = suite.orch.api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
    await trusted.next(); // the snapshot: this stream is open
    const revokedAt = Date.now();
    // As `pnpm keys revoke` writes it.
    writeFileSync(jwksFile, JSON.stringify({ keys: TEST_PUBLIC_KEYS.keys, revoked: [laptopKey.kid] }));
    const end = await ending(stream);
    expect(end.error?.code).toBe(status.UNAUTHENTICATED);
    expect(end.error?.message).toMatch(/key laptop-test is not trusted \(unknown or revoked\)/);
    expect(end.at - revokedAt).toBeLessThan(2000);

    await suite.orch.api.cancelSession({ sessionId: id, reason: "test" });
    const heard: SessionState[] = [];
    for (let r = await trusted.next(); !r.done; r = await trusted.next())
      if (r.value.event.case === "transition") heard.push(r.value.event.value.to);
    expect(heard).toContain(SessionState.CANCELLED);
  });
});
