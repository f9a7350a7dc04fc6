import { create } from "@bufbuild/protobuf";
import { QueryRiskRequestSchema } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { cnMobileToE164, idCardCheckCharacter, parseIdCard } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "./demo-customers.js";
import { normaliseQueryRisk, queryRiskViolations } from "./identity.js";

describe("normaliseQueryRisk", () => {
  it("upper-cases the x and writes the mobile in E.164", () => {
    const request = create(QueryRiskRequestSchema, { idCard: "11010119830405052x", phone: "150 1234 5678" });
    normaliseQueryRisk(request);
    expect(request).toMatchObject({ idCard: "11010119830405052X", phone: "+8615012345678" });
  });

  it.each(["(139)12345678", "+86 (139) 1234-5678", "139 1234 5678", "+86-139-1234-5678", "86 13912345678"])(
    "writes %j as +8613912345678",
    (phone) => {
      const request = create(QueryRiskRequestSchema, { idCard: "110101198507212349", phone });
      normaliseQueryRisk(request);
      expect(request.phone).toBe("+8613912345678");
    },
  );

  it("leaves what it does not recognise for validation to refuse", () => {
    const request = create(QueryRiskRequestSchema, { idCard: "not-an-id", phone: "+1 202 555 0143" });
    normaliseQueryRisk(request);
    expect(request).toMatchObject({ idCard: "not-an-id", phone: "+1 202 555 0143" });
  });
});

describe("queryRiskViolations", () => {
  const rulesOf = (idCard: string, phone: string) =>
    queryRiskViolations(create(QueryRiskRequestSchema, { idCard, phone })).map((v) => [v.field, v.errorReason]);
  const noSuchDay = `11010119900230123${idCardCheckCharacter("11010119900230123")}`;

  it("names every field its rules refuse, each with its own reason, and neither value", () => {
    expect(rulesOf(noSuchDay, "12345678901")).toEqual([
      ["id_card", "INVALID_ID_CARD_FORMAT"],
      ["phone", "INVALID_PHONE_FORMAT"],
    ]);
    const text = JSON.stringify(queryRiskViolations(create(QueryRiskRequestSchema, { idCard: noSuchDay, phone: "x" })));
    expect(text).not.toContain(noSuchDay.slice(0, 6));
  });

  it("finds nothing in a demo customer's request", () => {
    for (const c of DEMO_CUSTOMERS) expect(rulesOf(c.idCard, c.phone)).toEqual([]);
  });
});

describe("demo customers", () => {
  it.each(DEMO_CUSTOMERS.map((c) => [c.idCard, c.phone] as const))(
    "%s / %s are canonical and valid",
    (idCard, phone) => {
      expect(parseIdCard(idCard)).toBe(idCard);
      expect(cnMobileToE164(phone)).toBe(phone);
    },
  );
});
