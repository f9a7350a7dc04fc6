// docs/adding-a-tool.md, checked by doing it: a fourth tool (test/fixtures/fourth-tool, a throwaway
// contract and handler) is added to a copy of the repository with no edit outside its own folder, its
// contract, its registry entry (proto/src/index.ts) and its kustomize entries (the overlays' images);
// then the copy is generated, built, checked, and the tool is called through an orchestrator session.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import {
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import { spawnTool } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const FIXTURE = join(root, "test", "fixtures", "fourth-tool");
const OVERLAYS = ["dev", "prod"].map((o) => join("deploy", "k8s", "overlays", o, "kustomization.yaml"));
const REGISTRY = join("proto", "src", "index.ts");
/** Where `pnpm gen`, `pnpm install` and the build write: the only other files the copy may differ in. */
const GENERATED = [
  /^proto\/src\/gen\/loopguard\/inventory\//,
  /^deploy\/k8s\//,
  /^deploy\/prometheus\//,
  /^services\/orchestrator\/src\/generated\//,
  /^docs\/kubernetes\.md$/,
  /^pnpm-lock\.yaml$/,
];

const work = mkdtempSync(join(tmpdir(), "loopguard-fourth-tool-"));
const data = join(work, ".data");
const processes: ServiceProcess[] = [];

/** Runs a command in the copy; a non-zero exit rejects with the end of its output. */
function run(command: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  const child: ChildProcess = spawn(command, args, { cwd: work, env: { ...process.env, ...env } });
  let output = "";
  child.stdout?.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr?.on("data", (c: Buffer) => (output += c.toString()));
  return new Promise((done, fail) =>
    child.once("exit", (code) =>
      code === 0
        ? done(output)
        : fail(new Error(`${command} ${args.join(" ")} exited ${code}:\n${output.slice(-3000)}`)),
    ),
  );
}

/** Every file of the copy, relative to it, leaving out what installs and builds make. */
function filesOf(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (["node_modules", "dist", ".data", ".git"].includes(entry.name)) return [];
    const path = join(dir, entry.name);
    return entry.isDirectory() ? filesOf(path, base) : [relative(base, path)];
  });
}

function differs(file: string): boolean {
  try {
    return !readFileSync(join(root, file)).equals(readFileSync(join(work, file)));
  } catch {
    return true;
  }
}

beforeAll(async () => {
  const tracked = execFileSync("git", ["ls-files", "-co", "--exclude-standard", "-z"], { cwd: root })
    .toString()
    .split("\0")
    .filter((f) => f && !f.startsWith("test/fixtures/fourth-tool/"));
  for (const file of tracked) {
    mkdirSync(dirname(join(work, file)), { recursive: true });
    try {
      copyFileSync(join(root, file), join(work, file));
    } catch {
      // Deleted in the working tree but still tracked: the copy is the working tree.
    }
  }
  // By hand, as the checklist says: the tool's folder and contract, its registry entry, its image in each overlay.
  cpSync(FIXTURE, work, { recursive: true });
  const registry = readFileSync(join(work, REGISTRY), "utf8")
    .replace(
      /^(import .*\n)(?!import)/m,
      '$1import { file_loopguard_inventory_v1_inventory } from "./gen/loopguard/inventory/v1/inventory_pb.js";\n',
    )
    .replace(/(export const contractFiles.*= \[\n)/, "$1  file_loopguard_inventory_v1_inventory,\n");
  expect(registry.match(/file_loopguard_inventory_v1_inventory\b/g)).toHaveLength(2);
  writeFileSync(join(work, REGISTRY), registry);
  for (const overlay of OVERLAYS) {
    const text = readFileSync(join(work, overlay), "utf8");
    const billing = /^ {2}- name: loopguard\/billing\n(?: {4}.*\n)+/m.exec(text)![0];
    writeFileSync(join(work, overlay), text.replace(billing, billing + billing.replaceAll("billing", "inventory")));
  }
  // A new workspace package means resolving again, which needs the registry's metadata; a machine that only ran
  // a frozen install has none cached, so --offline fails there (the packages themselves come from the store).
  await run("pnpm", ["install", "--prefer-offline", "--no-frozen-lockfile"]);
  // gen builds the deploy package and what it imports (the contracts, the orchestrator) before it writes what it
  // derives from the tools, the orchestrator's local addresses among them: built again here with the new tool, and
  // nothing the steps below do not run.
  await run("pnpm", ["gen"]);
  await run("pnpm", ["-s", "--filter", "@loopguard/orchestrator", "--filter", "@loopguard/inventory", "run", "build"]);
}, 900_000);

afterAll(async () => {
  for (const p of processes) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
  await Promise.all(processes.map((p) => p.exited));
  rmSync(work, { recursive: true, force: true });
});

describe("a fourth tool added by docs/adding-a-tool.md", () => {
  it("needs no edit outside its folder, its contract, its registry entry and its kustomize entries", () => {
    const changed = filesOf(work).filter(differs).sort();
    const byHand = changed.filter((f) => OVERLAYS.includes(f) || !GENERATED.some((g) => g.test(f)));
    console.log(`fourth tool: files written by hand\n  ${byHand.join("\n  ")}`);
    expect(byHand).toEqual([...filesOf(FIXTURE), REGISTRY, ...OVERLAYS].sort());
    // Everything the suite derives from a tool was generated for it.
    expect(changed).toEqual(
      expect.arrayContaining([
        "deploy/k8s/base/services/inventory.yaml",
        "services/orchestrator/src/generated/local-tool-addresses.ts",
        "deploy/prometheus/rules/loopguard-slo-inventory.yml",
        "deploy/prometheus/slo-alerts/inventory.test.yml",
      ]),
    );
  });

  it("passes the registration checks and renders and validates for Kubernetes", async () => {
    const registration = await run(
      "npx",
      ["vitest", "run", "--project", "@loopguard/deploy", "--reporter=verbose", "tool-registration"],
      {
        NO_COLOR: "1",
      },
    );
    expect(registration).toMatch(/tool service inventory/);
    expect(registration).not.toMatch(/\bfailed\b/);
    const k8s = await run("pnpm", ["-s", "check:k8s"]);
    expect(k8s).toMatch(/\b0 errors\b/);
  }, 600_000);

  it("is called through an orchestrator session, with its contract's validation and metrics", async () => {
    const keys = JSON.parse(
      await run(
        "node",
        [
          "--input-type=module",
          "-e",
          "const { ensureLocalKeys } = await import('./services/tool-sdk/dist/index.js');" +
            "process.stdout.write(JSON.stringify(ensureLocalKeys(process.env.LOOPGUARD_DATA_DIR)));",
        ],
        { LOOPGUARD_DATA_DIR: data },
      ),
    ) as { jwks: string; orchestrator: string };
    const jwks = readFileSync(keys.jwks, "utf8");
    const inventory = await spawnTool(join(work, "services", "inventory", "dist", "main.js"), {
      LOOPGUARD_DATA_DIR: data,
      LOOPGUARD_JWKS: jwks,
      INVENTORY_PORT: "0",
      INVENTORY_METRICS_PORT: "0",
    });
    processes.push(inventory);
    const orchestrator = await spawnTool(
      join(work, "services", "orchestrator", "dist", "main.js"),
      {
        LOOPGUARD_DATA_DIR: data,
        LOOPGUARD_JWKS: jwks,
        LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
        ORCHESTRATOR_PORT: "0",
        ORCHESTRATOR_HTTP_PORT: "0",
        INVENTORY_ADDR: inventory.address,
      },
      45_000,
    );
    processes.push(orchestrator);
    const session = async (sku: string) =>
      JSON.parse(
        await run(
          "node",
          [
            "services/orchestrator/dist/cli/loopguard.js",
            "run",
            `How many units of ${sku} are on hand?`,
            "--policy",
            "single-call",
            "--task",
            JSON.stringify({ kind: "tool_call", tool: "inventory_get_stock", arguments: { sku } }),
            "--scope",
            "inventory:read",
            "--wait",
            "--json",
            "--addr",
            orchestrator.address,
          ],
          { LOOPGUARD_DATA_DIR: data },
        ),
      ) as Record<string, unknown>;

    const found = await session("SKU-0001");
    expect(found).toMatchObject({ state: "DONE", stop_reason: "done" });
    expect(JSON.stringify(found.answer)).toMatch(/42/);

    const missing = await session("SKU-0999");
    expect(JSON.stringify(missing)).toMatch(/SKU_NOT_FOUND|NOT_FOUND/);

    const metrics = await (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^loopguard_tool_client_calls_total\{tool="inventory",[^}]*outcome="ok"[^}]*\} [1-9]/m);
  }, 180_000);
});
