// Writes deploy/prometheus/{rules.yml,prometheus.local.yml} from the contracts; with --check,
// writes nothing and exits 1 when a committed file differs from what the contracts give.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { renderPrometheusFiles } from "./prometheus-files.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const check = process.argv.includes("--check");

let rendered: Map<string, string>;
try {
  rendered = renderPrometheusFiles(repoRoot, contractFiles);
} catch (error) {
  // A bad overrides file or a contract without SLA numbers: say which, without a stack trace.
  process.stderr.write(`gen-prometheus: ${(error as Error).message}\n`);
  process.exit(2);
}

const stale: string[] = [];
for (const [path, content] of rendered) {
  const target = join(repoRoot, path);
  const current = existsSync(target) ? readFileSync(target, "utf8") : undefined;
  if (current === content) continue;
  if (check) {
    stale.push(path);
  } else {
    writeFileSync(target, content);
    process.stdout.write(`wrote ${path}\n`);
  }
}
if (stale.length > 0) {
  process.stderr.write(`out of date with the contracts (run \`pnpm gen\`): ${stale.join(", ")}\n`);
  process.exit(1);
}
