// The workspace's own checks, run beside the tests by background.ts and judged by
// workspace-checks.int.test.ts: each reads the build `pnpm test` made.
import { join } from "node:path";

export interface WorkspaceCheck {
  readonly name: string;
  /** What it proves, as the test's name says it. */
  readonly proves: string;
  readonly command: readonly string[];
}

export const CHECKS: readonly WorkspaceCheck[] = [
  {
    name: "typecheck",
    proves: "every package's sources typecheck with their tests and tools (pnpm -r run typecheck)",
    command: ["pnpm", "-r", "--workspace-concurrency=1", "run", "typecheck"],
  },
  {
    name: "generated",
    proves:
      "the files generated from the code are current: Prometheus rules, deploy/k8s's generated parts, the docs' tables",
    command: ["node", "deploy/dist/manifests/gen-main.js", "--check"],
  },
  {
    name: "manifests",
    proves: "every Kubernetes overlay renders and every object in it validates strictly",
    command: ["node", "deploy/dist/manifests/check-main.js"],
  },
];

export const checksDir = (root: string): string => join(root, ".data", "checks");

/** The temp folder's loopguard-* entries as the run starts (background.ts), in checksDir. */
export const TEMP_BEFORE = "tmp-before.json";
