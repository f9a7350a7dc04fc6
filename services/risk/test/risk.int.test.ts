// A real risk server on 127.0.0.1:0 over a real store, called through a real grpc-js client.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { status } from "@grpc/grpc-js";
import { refusal } from "@loopguard/test-kit";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import type { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { CallError, createRawClient, idCardCheckCharacter, type RawClient } from "@loopguard/tool-sdk";
import { startTestTool, type TestTool, testToken } from "@loopguard/tool-sdk/testing";
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { RiskStore } from "../src/risk-store.js";
import { BACKEND_DOWN_RETRY_AFTER_MS, build, DEMO_CUSTOMERS } from "../src/server.js";
import { SqliteRiskStore } from "../src/sqlite-risk-store.js";
import { testKeys } from "./test-keys.js";

const LOW = DEMO_CUSTOMERS[0]!;
const WITH_X = DEMO_CUSTOMERS.find((c) => c.idCard.endsWith("X"))!;
const UNSCORABLE = DEMO_CUSTOMERS.find((c) => c.riskScore === -1)!;
/** Valid id card and CN mobile that belong to no demo customer. */
const STRANGER = { idCard: "110101199001153454", phone: "+8613512345678" };

describe("risk over gRPC", () => {
  let dir: string;
  let store: RiskStore;
  let t: TestTool<typeof RiskService>;
  let client: RawClient<typeof RiskService>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "risk-int-"));
    store = await SqliteRiskStore.open(join(dir, "risk.db"), testKeys);
    t = await startTestTool(build({ store }));
    client = await t.client(["risk:read"]);
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });
  afterEach(() => {
    store.available = true;
  });

  it("returns a demo customer's score, reason and factors", async () => {
    const response = await client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone });
    expect(response.riskScore).toBe(LOW.riskScore);
    expect(response.reason).toBe(LOW.reason);
    expect(response.factors).toEqual(LOW.factors);
  });

  it.each(DEMO_CUSTOMERS.map((c) => [c.riskScore, c] as const))("scores demo customer %i", async (score, c) => {
    const response = await client.queryRisk({ idCard: c.idCard, phone: c.phone });
    expect(response.riskScore).toBe(score);
    expect(response.reason).not.toContain(c.idCard);
    expect(response.reason).not.toContain(c.phone.slice(3));
  });

  it("GetCustomerRisk scores the customer an order names; an unknown customer id is NOT_FOUND USER_NOT_FOUND", async () => {
    for (const c of DEMO_CUSTOMERS) {
      for (const customerId of c.customerIds)
        expect((await client.getCustomerRisk({ customerId })).riskScore).toBe(c.riskScore);
    }
    const missing = await refusal(client.getCustomerRisk({ customerId: "cust_nobody" }), CallError);
    expect(missing.code).toBe(status.NOT_FOUND);
    expect(missing.reason).toBe("USER_NOT_FOUND");
    // A NUL, which PostgreSQL's text cannot hold, is the caller's mistake, not the backend's outage.
    for (const customerId of ["", "cust\u0000demo_0001"]) {
      const refused = await refusal(client.getCustomerRisk({ customerId }), CallError);
      expect([customerId, refused.code]).toEqual([customerId, status.INVALID_ARGUMENT]);
      expect(refused.fieldViolations.map((v) => v.field)).toEqual(["customer_id"]);
    }
  });

  it("answers -1 with the reason when the score cannot be computed", async () => {
    const response = await client.queryRisk({ idCard: UNSCORABLE.idCard, phone: UNSCORABLE.phone });
    expect(response.riskScore).toBe(-1);
    expect(response.reason).toContain("insufficient history");
  });

  it("accepts a lower-case x check character", async () => {
    const response = await client.queryRisk({ idCard: WITH_X.idCard.toLowerCase(), phone: WITH_X.phone });
    expect(response.riskScore).toBe(WITH_X.riskScore);
  });

  it.each(["138 0013 8000", "+86 138-0013-8000", "13800138000"])(
    "finds the customer by phone written as %j",
    async (phone) => {
      const response = await client.queryRisk({ idCard: LOW.idCard, phone });
      expect(response.riskScore).toBe(LOW.riskScore);
    },
  );

  it("refuses a wrong check character with a violation on id_card", async () => {
    const wrong = LOW.idCard.slice(0, 17) + (LOW.idCard[17] === "3" ? "4" : "3");
    const error = await refusal(client.queryRisk({ idCard: wrong, phone: LOW.phone }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations).toEqual([expect.objectContaining({ field: "id_card", reason: "id_card.checksum" })]);
  });

  it("refuses a 17-character id card with a violation on id_card", async () => {
    const error = await refusal(client.queryRisk({ idCard: LOW.idCard.slice(0, 17), phone: LOW.phone }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toContain("id_card");
    expect(error.fieldViolations.every((v) => v.field === "id_card")).toBe(true);
  });

  it("refuses an id card whose birth date is no real day as INVALID_ID_CARD_FORMAT", async () => {
    const body = "11010119990229123";
    const error = await refusal(
      client.queryRisk({ idCard: body + idCardCheckCharacter(body), phone: LOW.phone }),
      CallError,
    );
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("INVALID_ID_CARD_FORMAT");
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["id_card"]);
  });

  it("refuses a phone with letters with a violation on phone", async () => {
    const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone: "call 13800138000" }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["phone"]);
  });

  it.each([
    ["a Beijing fixed line", "010 1234 5678"],
    ["a US number", "+1 202 555 0143"],
    ["digits that are no number", "12345678901"],
  ])("refuses %s as INVALID_PHONE_FORMAT on phone", async (_, phone) => {
    const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("INVALID_PHONE_FORMAT");
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["phone"]);
  });

  it("reports both fields when both are malformed", async () => {
    const error = await refusal(client.queryRisk({ idCard: "12345", phone: "abc" }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(new Set(error.fieldViolations.map((v) => v.field))).toEqual(new Set(["id_card", "phone"]));
  });

  /** The violations as `field rule`, in the order of the request's fields. */
  const violationsOf = (error: CallError) => error.fieldViolations.map((v) => `${v.field} ${v.reason}`);
  const BAD_BIRTH = `11010119900230123${idCardCheckCharacter("11010119900230123")}`;
  const BAD_CHECK = LOW.idCard.slice(0, 17) + (LOW.idCard[17] === "3" ? "4" : "3");

  it.each([
    ["its birth date no real day and a phone no number", BAD_BIRTH, "12345678901", ["id_card id_card.gb11643"]],
    ["a wrong check character and a phone no number", BAD_CHECK, "12345678901", ["id_card id_card.checksum"]],
  ])("names both fields at once, as REQUEST_INVALID, for an id card with %s", async (_, idCard, phone, idRules) => {
    const error = await refusal(client.queryRisk({ idCard, phone }), CallError);
    expect([status[error.code], error.reason]).toEqual(["INVALID_ARGUMENT", "REQUEST_INVALID"]);
    expect(violationsOf(error)).toEqual([...idRules, "phone phone.cn_mobile"]);
    expect(error.message).not.toMatch(/1101011|12345678901/);
  });

  it("names the id card's birth date beside the contract's rules on a phone with letters", async () => {
    const error = await refusal(client.queryRisk({ idCard: BAD_BIRTH, phone: "abc" }), CallError);
    expect([status[error.code], error.reason]).toEqual(["INVALID_ARGUMENT", "REQUEST_INVALID"]);
    expect(violationsOf(error)).toEqual(["id_card id_card.gb11643", "phone string.min_len", "phone string.pattern"]);
    expect(error.message).not.toMatch(/1101011|abc/);
  });

  it("does not add the GB 11643 rule to an id card the contract already refused", async () => {
    const error = await refusal(client.queryRisk({ idCard: "12345", phone: "12345678901" }), CallError);
    expect(violationsOf(error).filter((v) => v.endsWith("gb11643"))).toEqual([]);
    expect(violationsOf(error)).toContain("phone phone.cn_mobile");
  });

  it("answers NOT_FOUND USER_NOT_FOUND for a valid id card and phone nobody has", async () => {
    const error = await refusal(client.queryRisk(STRANGER), CallError);
    expect(error.code).toBe(status.NOT_FOUND);
    expect(error.reason).toBe("USER_NOT_FOUND");
    expect(error.retryAfterMs).toBeUndefined();
  });

  it("answers NOT_FOUND for a demo id card with another demo customer's phone", async () => {
    const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone: WITH_X.phone }), CallError);
    expect(error.code).toBe(status.NOT_FOUND);
  });

  it("answers UNAVAILABLE BACKEND_DOWN with a 30 s retry when the store is down, and recovers", async () => {
    store.available = false;
    const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone }), CallError);
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.reason).toBe("BACKEND_DOWN");
    expect(error.retryAfterMs).toBe(BACKEND_DOWN_RETRY_AFTER_MS);
    expect(BACKEND_DOWN_RETRY_AFTER_MS).toBe(30_000);
    store.available = true;
    expect((await client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone })).riskScore).toBe(LOW.riskScore);
  });

  it("answers UNAVAILABLE with RetryInfo during an outage injected through ToolAdminService, and OK once it is off", async () => {
    const admin = createRawClient(ToolAdminService, t.address, {
      token: await testToken({ subject: "drill", audience: "risk", scopes: ["tool:admin"] }),
    });
    try {
      await admin.setFaults({ profile: { outage: true, retryAfterMs: 30_000 } });
      const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone }), CallError);
      expect(error.code).toBe(status.UNAVAILABLE);
      expect(error.reason).toBe("FAULT_INJECTED");
      expect(error.retryAfterMs).toBe(30_000);
      await admin.setFaults({ profile: {} });
      expect((await client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone })).riskScore).toBe(LOW.riskScore);
    } finally {
      await admin.setFaults({ profile: {} });
      admin.close();
    }
  });

  it("refuses a caller without scope risk:read with PERMISSION_DENIED", async () => {
    const other = await t.client(["billing:refund"]);
    const error = await refusal(other.queryRisk({ idCard: LOW.idCard, phone: LOW.phone }), CallError);
    expect(error.code).toBe(status.PERMISSION_DENIED);
    expect(error.reason).toBe("SCOPE_MISSING");
  });

  it("answers only OK, INVALID_ARGUMENT or NOT_FOUND to 1,000 random requests", async () => {
    const digits = (n: number) => fc.string({ unit: fc.constantFrom(..."0123456789"), minLength: n, maxLength: n });
    const validShapedIdCard = fc
      .tuple(digits(17), fc.constantFrom(..."0123456789Xx"))
      .map(([body, check]) => body + check);
    const validIdCard = digits(17).map((body) => body + idCardCheckCharacter(body));
    const demoIdCard = fc.constantFrom(...DEMO_CUSTOMERS.map((c) => c.idCard), WITH_X.idCard.toLowerCase());
    const cnMobile = fc
      .tuple(
        fc.constantFrom("13", "14", "15", "16", "17", "18", "19"),
        digits(9),
        fc.constantFrom("", "+86 ", "+86", "0086"),
      )
      .map(([prefix, rest, country]) => country + prefix + rest);
    const demoPhone = fc.constantFrom(...DEMO_CUSTOMERS.map((c) => c.phone), "138 0013 8000");
    const phoneAlphabet = fc.string({ unit: fc.constantFrom(..."+0123456789 ()-"), minLength: 0, maxLength: 24 });
    const request = fc.record({
      idCard: fc.oneof(fc.string({ maxLength: 24 }), validShapedIdCard, validIdCard, demoIdCard),
      phone: fc.oneof(fc.string({ maxLength: 24 }), phoneAlphabet, cnMobile, demoPhone),
    });
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(request, async (req) => {
        const code = await client.queryRisk(req).then(
          () => status.OK,
          (e: unknown) => (e instanceof CallError ? e.code : status.UNKNOWN),
        );
        seen.set(status[code], (seen.get(status[code]) ?? 0) + 1);
        expect([status.OK, status.INVALID_ARGUMENT, status.NOT_FOUND]).toContain(code);
      }),
      { numRuns: 1000 },
    );
    // The generators must reach every outcome, or the property says little.
    expect([...seen.keys()].sort()).toEqual(["INVALID_ARGUMENT", "NOT_FOUND", "OK"]);
  });

  it("never writes a demo id card or phone into a log line", () => {
    expect(t.logs.length).toBeGreaterThan(0);
    const text = t.logs.map((line) => JSON.stringify(line)).join("\n");
    for (const c of DEMO_CUSTOMERS) {
      expect(text).not.toContain(c.idCard);
      expect(text).not.toContain(c.idCard.toLowerCase());
      expect(text).not.toContain(c.phone.slice(3));
    }
  });
});

describe("risk over gRPC with its store closed", () => {
  it("answers UNAVAILABLE BACKEND_DOWN with a 30 s retry", async () => {
    const dir = mkdtempSync(join(tmpdir(), "risk-int-closed-"));
    const store = await SqliteRiskStore.open(join(dir, "risk.db"), testKeys);
    const t = await startTestTool(build({ store }));
    try {
      const client = await t.client(["risk:read"]);
      await store.close();
      const error = await refusal(client.queryRisk({ idCard: LOW.idCard, phone: LOW.phone }), CallError);
      expect(error.code).toBe(status.UNAVAILABLE);
      expect(error.reason).toBe("BACKEND_DOWN");
      expect(error.retryAfterMs).toBe(30_000);
    } finally {
      await t.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
