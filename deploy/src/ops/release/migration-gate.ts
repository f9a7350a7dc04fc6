// The expand/contract gate of a blue-green release: during a release both colours serve on one
// schema, and the migration step of the new image runs before its pods start. A migration the
// new image brings (one the live image does not have) that is declared `contract` removes or
// changes what older code uses, so the live colour could not keep serving on it — unless it
// names, as `after`, an expand migration the live image already has: that release already runs
// without what the contract removes. Each image lists its migrations with their declarations
// (`<service> migrations`, label io.loopguard.migrations), so the gate compares what runs.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MigrationDeclaration, MigrationListing } from "@loopguard/sql-store";
import { extractLabelledFile, ReleaseRefused } from "./contract-gate.js";

export const IMAGE_MIGRATIONS_LABEL = "io.loopguard.migrations";

/** Blue-green releases of stateful tools run on PostgreSQL (a SQLite file is one pod's). */
const DIALECT = "postgres";

export interface ImageMigrations {
  readonly image: string;
  readonly listing: MigrationListing;
}

/** The contract migrations `candidate` brings that the live release cannot run on. */
export function contractsBlocking(
  live: readonly MigrationDeclaration[],
  candidate: readonly MigrationDeclaration[],
): MigrationDeclaration[] {
  const running = new Set(live.map((m) => m.name));
  return candidate.filter(
    (m) => !running.has(m.name) && m.compatibility === "contract" && !(m.after !== undefined && running.has(m.after)),
  );
}

/**
 * Refuses (ReleaseRefused naming the migration) a release whose image brings a contract migration
 * the live colour cannot run on while it still serves; resolves with the migrations it brings.
 */
export function checkMigrations(check: {
  readonly live: ImageMigrations;
  readonly candidate: ImageMigrations;
  readonly colour?: string;
}): string[] {
  const { live, candidate } = check;
  const running = new Set(live.listing[DIALECT].map((m) => m.name));
  const brought = candidate.listing[DIALECT].filter((m) => !running.has(m.name)).map((m) => m.name);
  const [blocking, ...more] = contractsBlocking(live.listing[DIALECT], candidate.listing[DIALECT]);
  if (!blocking) return brought;
  const liveSet = `the live ${check.colour ? `${check.colour} set ` : ""}(${live.image})`;
  const how =
    blocking.compatibility === "contract" && blocking.after !== undefined
      ? `release an image with its expand step ${blocking.after} first and let it become live, then this one`
      : 'ship it in two releases: first an expand migration and code that no longer needs what this one removes, then this one declared { compatibility: "contract", after: <that expand migration> }';
  throw new ReleaseRefused(
    `${candidate.image} brings the contract migration ${blocking.name} of the ${candidate.listing.store} schema, which ${liveSet} cannot run on while it still serves: ${how} (docs/kubernetes.md, "Expand and contract")`,
    more.length > 0 ? `further contract migrations it brings: ${more.map((m) => m.name).join(", ")}` : "",
  );
}

/** The migrations an image lists (label io.loopguard.migrations); pulls an image that is not here when `pull` says so. */
export async function imageMigrations(image: string, pull: boolean): Promise<ImageMigrations> {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-release-migrations-"));
  try {
    const file = await extractLabelledFile(
      image,
      IMAGE_MIGRATIONS_LABEL,
      join(dir, "migrations.json"),
      pull,
      "migration list",
    );
    return { image, listing: JSON.parse(readFileSync(file, "utf8")) as MigrationListing };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The gate as a release runs it, after the contract gate: both images' lists, then checkMigrations. */
export async function migrationGate(
  log: (line: string) => void,
  options: { readonly live: string; readonly candidate: string; readonly pull: boolean; readonly colour?: string },
): Promise<string[]> {
  log(`migration gate: the migrations ${options.candidate} brings against the live ${options.live}`);
  const live = await imageMigrations(options.live, options.pull);
  const candidate = await imageMigrations(options.candidate, options.pull);
  const brought = checkMigrations({ live, candidate, ...(options.colour ? { colour: options.colour } : {}) });
  log(
    `migration gate: ${brought.length > 0 ? `brings ${brought.join(", ")}; the live set runs on each` : "brings no migration"}`,
  );
  return brought;
}
