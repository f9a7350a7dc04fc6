// Which schemas a build may serve on, from its migrations' declarations and the ledger's rows.
import { describe, expect, it } from "vitest";
import { checkMigrationList, type MigrationDeclaration } from "./migrate.js";
import { type AppliedMigration, assessSchema, schemaProblem } from "./schema.js";

const BUILD: MigrationDeclaration[] = [
  { name: "0001-orders", compatibility: "expand" },
  { name: "0002-reason-code", compatibility: "expand" },
];
const row = (
  name: string,
  compatibility: AppliedMigration["compatibility"] = "expand",
  after: string | null = null,
): AppliedMigration => ({ name, compatibility, after });

describe("assessSchema", () => {
  it("lists what the database lacks, in order, and says to run the migration step", () => {
    const assessment = assessSchema("billing", BUILD, [row("0001-orders")]);
    expect(assessment).toEqual({ store: "billing", pending: ["0002-reason-code"], incompatible: [] });
    expect(schemaProblem(assessment)).toMatch(
      /^the billing schema lacks 1 migration\(s\) this build needs \(0002-reason-code\): run the migration step first/,
    );
  });

  it("runs on a later release's expand migrations and on contracts whose expand step it has, but not on others", () => {
    const applied = [
      row("0001-orders"),
      row("0002-reason-code"),
      row("0003-index"),
      row("0004-drop-reason", "contract", "0002-reason-code"),
    ];
    expect(schemaProblem(assessSchema("billing", BUILD, applied))).toBeUndefined();
    const older = BUILD.slice(0, 1);
    const assessment = assessSchema("billing", older, applied);
    expect(assessment.incompatible.map((m) => m.name)).toEqual(["0004-drop-reason"]);
    expect(schemaProblem(assessment)).toBe(
      "the billing schema has contract migration(s) of a later release that this build cannot run on (0004-drop-reason): run that release's image, not this one",
    );
    // A row recorded before declarations existed is no later release's contract.
    expect(
      schemaProblem(assessSchema("billing", older, [row("0001-orders"), row("0002-reason-code", null)])),
    ).toBeUndefined();
  });
});

describe("checkMigrationList", () => {
  it("refuses a repeated name and a contract whose expand step is not an earlier migration", () => {
    expect(() => checkMigrationList([...BUILD, BUILD[0]!])).toThrow("two migrations share the name 0001-orders");
    expect(() =>
      checkMigrationList([
        { name: "0001-drop", compatibility: "contract", after: "0002-reason-code" },
        ...BUILD.slice(1),
      ]),
    ).toThrow('migration 0001-drop: its expand step "0002-reason-code" is not an earlier migration of the same list');
    expect(() =>
      checkMigrationList([...BUILD, { name: "0003-drop", compatibility: "contract", after: "0002-reason-code" }]),
    ).not.toThrow();
  });
});
