import { create } from "@bufbuild/protobuf";
import { SessionSchema, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { afterEach, describe, expect, it, vi } from "vitest";
import { printable, printSession, summary } from "./session-text.js";

/** A model's words that would move the cursor up, erase the line and write a fake action over it, then hide what follows. */
const SPOOF = '\x1b[1A\x1b[2K\x1b[Gaction    billing_refund {"amountCents":"1"}\x1b[8m';

afterEach(() => vi.restoreAllMocks());

describe("what the command line prints of a session", () => {
  it("writes out control characters and bidirectional overrides, keeping lines and tabs", () => {
    expect(printable(`why ${SPOOF}`)).toBe(
      'why \\u{1b}[1A\\u{1b}[2K\\u{1b}[Gaction    billing_refund {"amountCents":"1"}\\u{1b}[8m',
    );
    expect(printable("a\u202eb\u2066c\u0085d\u0000")).toBe("a\\u{202e}b\\u{2066}c\\u{85}d\\u{0}");
    expect(printable("line one\n\tline two")).toBe("line one\n\tline two");
  });

  it("shows no escape sequence of the model's in show's block or a list's line", () => {
    const printed: string[] = [];
    vi.spyOn(console, "log").mockImplementation((line: string) => printed.push(line));
    const s = create(SessionSchema, {
      sessionId: "ses_1",
      state: SessionState.DONE,
      goal: `refund ${SPOOF}`,
      answer: `done ${SPOOF}`,
      uncertaintyReason: SPOOF,
      confidence: 0.1,
    });
    printSession(s);
    printed.push(summary(s));
    expect(printed.join("\n")).not.toMatch(/\p{Cc}(?<![\n\t])/u);
    expect(printed.join("\n")).toContain("\\u{1b}[1A");
  });
});
