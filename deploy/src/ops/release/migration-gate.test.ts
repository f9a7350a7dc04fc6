// The expand/contract gate with fixture migration lists, and on the list a real service prints
// (`node services/billing/dist/main.js migrations`, what its image carries; run `pnpm build` first).
import { execFileSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { MigrationDeclaration, MigrationListing } from "@loopguard/sql-store";
import { describe, expect, it } from "vitest";
import { ReleaseRefused } from "./contract-gate.js";
import { checkMigrations } from "./migration-gate.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
let listed: MigrationListing | undefined;
const billingListing = (): MigrationListing =>
  (listed ??= JSON.parse(
    execFileSync(process.execPath, [join(root, "services", "billing", "dist", "main.js"), "migrations"], {
      encoding: "utf8",
    }),
  ));

const image = (tag: string, postgres: readonly MigrationDeclaration[]) => ({
  image: `loopguard/billing:${tag}`,
  listing: { store: "billing", sqlite: postgres, postgres },
});
const EXPAND_ADD: MigrationDeclaration = { name: "0004-refund-reason-code", compatibility: "expand" };
const CONTRACT_DROP: MigrationDeclaration = {
  name: "0005-drop-refund-reason",
  compatibility: "contract",
  after: "0004-refund-reason-code",
};
const CONTRACT_BARE: MigrationDeclaration = { name: "0005-drop-refund-reason", compatibility: "contract" };

function refusal(run: () => unknown): ReleaseRefused {
  try {
    run();
  } catch (error) {
    if (error instanceof ReleaseRefused) return error;
    throw error;
  }
  throw new Error("the release was not refused");
}

describe("the expand/contract gate of a blue-green release", () => {
  it("lets through the real billing image's migrations over themselves and expand migrations a new image brings", () => {
    const today = billingListing().postgres;
    expect(today.map((m) => m.compatibility)).toEqual(["expand", "expand", "expand"]);
    expect(checkMigrations({ live: image("old", today), candidate: image("new", today) })).toEqual([]);
    expect(checkMigrations({ live: image("old", today), candidate: image("new", [...today, EXPAND_ADD]) })).toEqual([
      "0004-refund-reason-code",
    ]);
  });

  it("refuses a contract migration the live colour cannot run on, naming it and the way in two releases", () => {
    const today = billingListing().postgres;
    const bare = refusal(() =>
      checkMigrations({
        live: image("old", today),
        candidate: image("new", [...today, EXPAND_ADD, CONTRACT_BARE]),
        colour: "blue",
      }),
    );
    expect(bare.message).toBe(
      "loopguard/billing:new brings the contract migration 0005-drop-refund-reason of the billing schema, which the live blue set (loopguard/billing:old) cannot run on while it still serves: " +
        'ship it in two releases: first an expand migration and code that no longer needs what this one removes, then this one declared { compatibility: "contract", after: <that expand migration> } (docs/kubernetes.md, "Expand and contract")',
    );
    // Its expand step and itself in one release: the live colour has neither.
    const both = refusal(() =>
      checkMigrations({
        live: image("old", today),
        candidate: image("new", [...today, EXPAND_ADD, CONTRACT_DROP]),
        colour: "green",
      }),
    );
    expect(both.message).toContain(
      "0005-drop-refund-reason of the billing schema, which the live green set (loopguard/billing:old) cannot run on",
    );
    expect(both.message).toContain(
      "release an image with its expand step 0004-refund-reason-code first and let it become live, then this one",
    );
  });

  it("lets the contract through in the second release, once the live image has its expand step", () => {
    const today = billingListing().postgres;
    const first = checkMigrations({ live: image("v1", today), candidate: image("v2", [...today, EXPAND_ADD]) });
    expect(first).toEqual(["0004-refund-reason-code"]);
    expect(
      checkMigrations({
        live: image("v2", [...today, EXPAND_ADD]),
        candidate: image("v3", [...today, EXPAND_ADD, CONTRACT_DROP]),
      }),
    ).toEqual(["0005-drop-refund-reason"]);
    // A contract already live is not brought again: a later release passes.
    expect(
      checkMigrations({
        live: image("v3", [...today, EXPAND_ADD, CONTRACT_BARE]),
        candidate: image("v4", [...today, EXPAND_ADD, CONTRACT_BARE]),
      }),
    ).toEqual([]);
  });
});
