import { describe, expect, it } from "vitest";
import { LogTail } from "./log-tail.js";

const line = (fields: Record<string, unknown>) =>
  JSON.stringify({ time: new Date().toISOString(), level: "info", msg: "m", ...fields });

describe("LogTail", () => {
  it("keeps lines by session_id, else by trace_id, and ignores lines with neither or that are not JSON", () => {
    const tail = new LogTail();
    tail.write(line({ session_id: "ses_a", msg: "one" }));
    tail.write(line({ trace_id: "t_a", msg: "two" }));
    tail.write(line({ msg: "unrelated" }));
    tail.write('not json "session_id"');
    expect(tail.linesFor("ses_a", "t_a").map((l) => l.msg)).toEqual(["one", "two"]);
    expect(tail.sessionCount).toBe(2);
  });

  it("keeps only the last N lines of a session", () => {
    const tail = new LogTail({ linesPerSession: 3 });
    for (let i = 0; i < 10; i += 1) tail.write(line({ session_id: "ses_a", msg: `l${i}` }));
    expect(tail.linesFor("ses_a").map((l) => l.msg)).toEqual(["l7", "l8", "l9"]);
  });

  it("drops the least recently written session past the session bound", () => {
    const tail = new LogTail({ maxSessions: 2 });
    tail.write(line({ session_id: "ses_a" }));
    tail.write(line({ session_id: "ses_b" }));
    tail.write(line({ session_id: "ses_a" }));
    tail.write(line({ session_id: "ses_c" }));
    expect(tail.sessionCount).toBe(2);
    expect(tail.linesFor("ses_b")).toEqual([]);
    expect(tail.linesFor("ses_a")).toHaveLength(2);
  });
});
