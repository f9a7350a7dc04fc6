import { create } from "@bufbuild/protobuf";
import { QueryRiskRequestSchema } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "./demo-customers.js";
import { cnMobileToE164, idCardCheckCharacter, normaliseIdCard, normaliseQueryRisk, parseIdCard } from "./identity.js";

describe("GB 11643 id card", () => {
  it("computes the check character, including X", () => {
    expect(idCardCheckCharacter("11010119800312123")).toBe("2");
    expect(idCardCheckCharacter("11010119830405052")).toBe("X");
  });

  it("accepts a number whose check character matches", () => {
    expect(parseIdCard("110101198003121232")).toBe("110101198003121232");
    expect(parseIdCard("11010119830405052X")).toBe("11010119830405052X");
  });

  it("refuses a number whose check character does not match", () => {
    expect(parseIdCard("110101198003121233")).toBeUndefined();
    expect(parseIdCard("11010119830405052Y")).toBeUndefined();
    expect(parseIdCard("110101198003121230")).toBeUndefined();
  });

  it("refuses numbers of the wrong length or with letters in the body", () => {
    expect(parseIdCard("11010119800312123")).toBeUndefined();
    expect(parseIdCard("1101011980031212321")).toBeUndefined();
    expect(parseIdCard("1101011980031212X2")).toBeUndefined();
  });

  it("refuses a birth date that is not a real day even with a matching check character", () => {
    const withBody = (body: string) => body + idCardCheckCharacter(body);
    expect(parseIdCard(withBody("11010119801332123"))).toBeUndefined(); // month 13
    expect(parseIdCard(withBody("11010119990229123"))).toBeUndefined(); // 1999 is no leap year
    expect(parseIdCard(withBody("11010118991231123"))).toBeUndefined(); // before 1900
    expect(parseIdCard(withBody("11010120000229123"))).toBe(withBody("11010120000229123"));
  });

  it("upper-cases a lower-case x check character", () => {
    expect(normaliseIdCard("11010119830405052x")).toBe("11010119830405052X");
    expect(parseIdCard("11010119830405052x")).toBe("11010119830405052X");
    expect(normaliseIdCard("x10101198304050521")).toBe("x10101198304050521");
  });
});

describe("CN mobile", () => {
  it.each(["138 0013 8000", "+86 138-0013-8000", "13800138000", "(+86) 138 0013 8000", "008613800138000", "+8613800138000"])(
    "writes %j as +8613800138000",
    (raw) => expect(cnMobileToE164(raw)).toBe("+8613800138000"),
  );

  it("refuses a Beijing fixed line", () => {
    expect(cnMobileToE164("010 1234 5678")).toBeUndefined();
    expect(cnMobileToE164("+86 10 1234 5678")).toBeUndefined();
  });

  it("refuses a shared-cost service number", () => {
    expect(cnMobileToE164("400 123 4567")).toBeUndefined();
  });

  it("refuses foreign numbers, mobile or not", () => {
    expect(cnMobileToE164("+1 202 555 0143")).toBeUndefined();
    expect(cnMobileToE164("+44 7911 123456")).toBeUndefined();
  });

  it("refuses digits that are no valid number and text outside the contract's alphabet", () => {
    expect(cnMobileToE164("12345678901")).toBeUndefined();
    expect(cnMobileToE164("138.0013.8000")).toBeUndefined();
    expect(cnMobileToE164("tel:13800138000")).toBeUndefined();
    expect(cnMobileToE164("1380013800")).toBeUndefined();
  });
});

describe("normaliseQueryRisk", () => {
  it("upper-cases the x and writes the mobile in E.164", () => {
    const request = create(QueryRiskRequestSchema, { idCard: "11010119830405052x", phone: "150 1234 5678" });
    normaliseQueryRisk(request);
    expect(request).toMatchObject({ idCard: "11010119830405052X", phone: "+8615012345678" });
  });

  it("leaves what it does not recognise for validation to refuse", () => {
    const request = create(QueryRiskRequestSchema, { idCard: "not-an-id", phone: "+1 202 555 0143" });
    normaliseQueryRisk(request);
    expect(request).toMatchObject({ idCard: "not-an-id", phone: "+1 202 555 0143" });
  });
});

describe("demo customers", () => {
  it.each(DEMO_CUSTOMERS.map((c) => [c.idCard, c.phone] as const))("%s / %s are canonical and valid", (idCard, phone) => {
    expect(parseIdCard(idCard)).toBe(idCard);
    expect(cnMobileToE164(phone)).toBe(phone);
  });
});
