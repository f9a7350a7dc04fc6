// GetOverview counts what the caller may list; how many sessions this replica drives now counts
// everyone's, so only sessions:admin is told it.
import { describe, expect, it } from "vitest";
import { type DashboardSources, overview } from "./dashboard-views.js";

const sources = {
  orchestrator: { store: { countByState: async () => ({ DONE: 1, AWAITING_APPROVAL: 0 }) }, activeCount: () => 3 },
} as unknown as DashboardSources;

describe("the overview's count of sessions driven here", () => {
  it("is told to sessions:admin, and is 0 for anyone else", async () => {
    expect((await overview(sources, { subject: "root", admin: true, approver: false })).activeHere).toBe(3);
    expect((await overview(sources, { subject: "stranger", admin: false, approver: true })).activeHere).toBe(0);
    expect((await overview(sources, { subject: "stranger", admin: false, approver: false })).total).toBe(1);
  });
});
