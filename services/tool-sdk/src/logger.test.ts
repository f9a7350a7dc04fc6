import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import { REDACTED } from "./pii.js";

function capture() {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ service: "t", write: (l) => lines.push(JSON.parse(l) as Record<string, unknown>) });
  return { log, lines };
}

describe("logger", () => {
  it("writes one JSON object per line with time, level, service, msg and bound fields", () => {
    const { log, lines } = capture();
    log.child({ trace_id: "abc" }).info("hello", { method: "Search" });
    expect(lines[0]).toMatchObject({ level: "info", service: "t", msg: "hello", trace_id: "abc", method: "Search" });
  });

  it("writes a nested child's bindings and its parent's, and leaves the parent's lines without them", () => {
    const { log, lines } = capture();
    const call = log.child({ trace_id: "abc" });
    call.child({ method: "Search" }).warn("inner");
    call.info("outer");
    log.info("root");
    expect(lines).toMatchObject([
      { msg: "inner", trace_id: "abc", method: "Search" },
      { msg: "outer", trace_id: "abc" },
      { msg: "root" },
    ]);
    expect(lines[1]).not.toHaveProperty("method");
    expect(lines[2]).not.toHaveProperty("trace_id");
  });

  it("redacts every string field that is not on the allow-list", () => {
    const { log, lines } = capture();
    log.info("call", {
      id_card: "11010119900307803X",
      phone: "+8613800138000",
      token: "eyJhbGciOi",
      order_id: "ord_DEMO00000001",
    });
    const line = JSON.stringify(lines[0]);
    expect(line).not.toContain("11010119900307803X");
    expect(line).not.toContain("13800138000");
    expect(line).not.toContain("eyJhbGciOi");
    expect(lines[0]).toMatchObject({
      id_card: REDACTED,
      phone: REDACTED,
      token: REDACTED,
      order_id: "ord_DEMO00000001",
    });
  });

  it("redacts a child's bound fields as it does a call's", () => {
    const { log, lines } = capture();
    log.child({ trace_id: "abc", phone: "+8613800138000", url: "/api/customers/11010119900307803X" }).info("bound");
    expect(JSON.stringify(lines[0])).not.toContain("13800138000");
    expect(lines[0]).toMatchObject({ trace_id: "abc", phone: REDACTED, url: `/api/customers/${REDACTED}` });
  });

  it("redacts nested objects under an unknown key and unknown keys inside a known one", () => {
    const { log, lines } = capture();
    log.info("cfg", { request: { phone: "+8613800138000" }, config: { port: 1, secret: "s3cr3t-value" } });
    expect(lines[0]?.request).toBe(REDACTED);
    expect(lines[0]?.config).toEqual({ port: 1, secret: REDACTED });
  });

  it("masks id cards and mobiles inside the message and the allowed fields it writes", () => {
    const { log, lines } = capture();
    log.error("lookup for (139)12345678 failed", {
      error_message: 'Unexpected token \'x\', "{"phone": +86 (139) 1234-5678 x" is not valid JSON',
      url: "/api/customers/11010519491231002x",
      violations: [{ field: "phone", reason: "got 139 1234 5678" }],
      count: 13912345678,
      trace_id: "ac09a81508038a8cd16222381507dadc",
    });
    const line = JSON.stringify(lines[0]);
    for (const raw of ["(139)12345678", "(139) 1234-5678", "139 1234 5678", "13912345678", "11010519491231002x"])
      expect(line).not.toContain(raw);
    expect(lines[0]).toMatchObject({
      msg: `lookup for ${REDACTED} failed`,
      url: `/api/customers/${REDACTED}`,
      violations: [{ field: "phone", reason: `got ${REDACTED}` }],
      count: REDACTED,
      trace_id: "ac09a81508038a8cd16222381507dadc",
    });
  });

  it("drops lines below the configured level", () => {
    const lines: string[] = [];
    const log = createLogger({ service: "t", level: "warn", write: (l) => lines.push(l) });
    log.info("quiet");
    log.warn("loud");
    expect(lines).toHaveLength(1);
  });
});
