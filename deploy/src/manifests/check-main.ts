// `pnpm check:k8s`: renders every overlay (and each optional component on prod) and validates
// every object strictly, offline, and checks every rendering's NetworkPolicies against the network
// flows (network-flows-check.ts) and each release path's state against a re-apply
// (release/reapply-check.ts); prints objects per rendering, the errors, and the time taken.
// Exit 1 on any error (runCli).
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { renderAll, validateRenderings } from "./renderings.js";
import { connectionBudget, describeBudget } from "./connection-budget-check.js";
import { checkFlows } from "./network-flows-check.js";
import { checkRbac } from "./rbac-check.js";
import { checkReapply } from "../ops/release/reapply-check.js";
import { runCli } from "../cli.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
function main(): number {
  const started = performance.now();
  const renderings = renderAll(repoRoot);
  const rendered = performance.now();
  const errors = validateRenderings(renderings);
  const validated = performance.now();
  for (const rendering of renderings) {
    const count = errors.filter((e) => e.rendering === rendering.name).length;
    process.stdout.write(`${rendering.name}: ${rendering.objects.length} objects, ${count} errors\n`);
  }
  // Policy: the PostgreSQL connection budget of every rendering with database clients.
  for (const budget of renderings.map(connectionBudget)) {
    if (!budget) continue;
    process.stdout.write(`${describeBudget(budget)}\n`);
    for (const message of budget.errors)
      errors.push({ rendering: budget.rendering, object: `${budget.rendering} connection budget`, message });
  }
  for (const error of errors) process.stderr.write(`${error.object}: ${error.message}\n`);
  const total = renderings.reduce((sum, r) => sum + r.objects.length, 0);
  process.stdout.write(
    `${total} objects in ${renderings.length} renderings, ${errors.length} errors; ` +
      `render ${((rendered - started) / 1000).toFixed(2)} s, validate ${((validated - rendered) / 1000).toFixed(2)} s\n`,
  );
  const services = discoverServices(resolve(repoRoot, "services"));
  const flows = checkFlows(repoRoot, renderings, services);
  const flowErrors = [...flows.stopped, ...flows.through, ...flows.unlisted];
  for (const error of flowErrors) process.stderr.write(`network flows: ${error}\n`);
  process.stdout.write(
    `network flows (docs/kubernetes.md) in every rendering: ${flows.checked} checks, ${flowErrors.length} errors\n`,
  );
  const rbac = checkRbac(renderings);
  for (const error of rbac.errors) process.stderr.write(`RBAC: ${error}\n`);
  const withTokens = [...new Set([...rbac.tokens.values()].flat())].sort();
  const readers = [...new Set([...rbac.secretReaders.values()].flat())].sort();
  process.stdout.write(
    `RBAC in every rendering: nothing cluster-wide, no wildcard, no Secret rule, writes only as listed; API tokens only in ${withTokens.join(", ")}; ` +
      `the namespace's Secrets readable through pods it starts only by ${readers.length > 0 ? `Role ${readers.join(", ")} (trusted as an operator of the namespace)` : "no Role"}; ${rbac.errors.length} errors\n`,
  );
  const reapply = checkReapply(repoRoot, services);
  for (const move of reapply.moves) process.stderr.write(`re-apply after a release: ${move}\n`);
  process.stdout.write(
    `re-apply after a release of ${reapply.checked.join(", ")}: ${reapply.moves.length} fields moved; ${((performance.now() - validated) / 1000).toFixed(2)} s\n`,
  );
  return errors.length + flowErrors.length + rbac.errors.length + reapply.moves.length === 0 ? 0 : 1;
}

runCli("check-k8s", main);
