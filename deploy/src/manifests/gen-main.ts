// Writes what derives from the contracts and the services' manifests: deploy/prometheus/{rules/,
// slo-alerts/, prometheus.local.yml} and the generated folders of deploy/k8s. With --check it
// writes nothing and exits 1 when a committed file differs, is missing, or is left over from a
// removed service.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { renderGeneratedFiles } from "./generated-files.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const check = process.argv.includes("--check");

let generated: ReturnType<typeof renderGeneratedFiles>;
try {
  generated = renderGeneratedFiles(repoRoot, contractFiles);
} catch (error) {
  // A bad overrides file, a manifest or a contract without SLA numbers: say which, without a stack trace.
  process.stderr.write(`gen: ${(error as Error).message}\n`);
  process.exit(2);
}

const stale: string[] = [];
for (const dir of generated.ownedDirs) {
  const absolute = join(repoRoot, dir);
  if (!existsSync(absolute)) continue;
  for (const name of readdirSync(absolute)) {
    const path = join(dir, name);
    if (generated.files.has(path)) continue;
    if (check) stale.push(path);
    else {
      rmSync(join(repoRoot, path));
      process.stdout.write(`removed ${path}\n`);
    }
  }
}
for (const [path, content] of generated.files) {
  const target = join(repoRoot, path);
  const current = existsSync(target) ? readFileSync(target, "utf8") : undefined;
  if (current === content) continue;
  if (check) {
    stale.push(path);
  } else {
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, content);
    process.stdout.write(`wrote ${path}\n`);
  }
}
if (stale.length > 0) {
  process.stderr.write(
    `out of date with the contracts and the services' manifests (run \`pnpm gen\`): ${stale.join(", ")}\n`,
  );
  process.exit(1);
}
