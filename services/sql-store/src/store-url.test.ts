import { describe, expect, it } from "vitest";
import { describeStoreLocation, parseStoreUrl, StoreUrlError } from "./store-url.js";

describe("parseStoreUrl", () => {
  it.each([
    ["sqlite:/var/lib/loopguard/billing.db", "/var/lib/loopguard/billing.db"],
    ["sqlite:///var/lib/loopguard/billing.db", "/var/lib/loopguard/billing.db"],
    ["sqlite:data/billing.db", "data/billing.db"],
    ["sqlite::memory:", ":memory:"],
  ])("reads %s as the SQLite file %s", (url, file) => {
    expect(parseStoreUrl(url, "BILLING_STORE")).toEqual({ kind: "sqlite", file });
  });

  it.each([
    "postgres://billing@db.example:5432/billing",
    "postgresql://billing:pw@db/billing?statement_timeout=2000",
    "postgres:///billing?host=/run/postgresql",
  ])("takes %s as a PostgreSQL URL, unchanged", (url) => {
    expect(parseStoreUrl(url, "BILLING_STORE")).toEqual({ kind: "postgres", url });
  });

  it.each([
    ["sqlite:", /^RISK_STORE names no SQLite file/],
    ["mysql://risk:hunter2@db/risk", /^RISK_STORE must be sqlite:<file> or postgres:/],
    ["postgres:///risk", /^RISK_STORE names no PostgreSQL host/],
    ["postgres://risk:hunter2@db:port/risk", /^RISK_STORE is not a valid PostgreSQL URL/],
    ["", /^RISK_STORE must be/],
    ["risk:hunter2@db/risk", /^RISK_STORE must be sqlite:<file> or postgres:/],
    ["host=db user=risk password=hunter2", /^RISK_STORE must be sqlite:<file> or postgres:/],
    ["postgres://db:port/risk?password=hunter2", /^RISK_STORE is not a valid PostgreSQL URL/],
  ])("refuses %j naming the variable and hiding the password", (url, message) => {
    let error: unknown;
    try {
      parseStoreUrl(url, "RISK_STORE");
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(StoreUrlError);
    expect((error as Error).message).toMatch(message);
    expect((error as Error).message).not.toContain("hunter2");
  });

  it("throws the error type a service asks for", () => {
    class ConfigError extends Error {}
    expect(() => parseStoreUrl("redis://x", "BILLING_STORE", ConfigError)).toThrow(ConfigError);
  });
});

describe("describeStoreLocation", () => {
  it("shows the file, or the URL without its credentials", () => {
    expect(describeStoreLocation({ kind: "sqlite", file: "/d/b.db" })).toBe("sqlite:/d/b.db");
    expect(describeStoreLocation({ kind: "postgres", url: "postgres://u:hunter2@db:5432/b" })).toBe(
      "postgres://***@db:5432/b",
    );
  });

  it.each([
    ["postgres://billing@db:5432/x?password=hunter2", "postgres://***@db:5432/x?password=***"],
    ["postgres://billing:hun@ter2@db:5432/x", "postgres://***@db:5432/x"],
    [
      "postgres:///x?host=/run/pg&user=billing&sslpassword=hunter2&password=hunter2",
      "postgres:///x?host=/run/pg&user=billing&sslpassword=***&password=***",
    ],
    ["postgres://db/x?application_name=a&PASSWORD=hunter2#f", "postgres://db/x?application_name=a&PASSWORD=***#f"],
  ])("hides the password of %s, wherever the URL holds it", (url, shown) => {
    expect(describeStoreLocation({ kind: "postgres", url })).toBe(shown);
  });
});
