// A recording `kubectl` for the release's tests, where no cluster can run: it appends each call's
// argv and stdin to calls.jsonl in FAKE_KUBECTL_DIR and answers from that folder's scenario.json —
// Prometheus answers recorded from a real Prometheus (test/fixtures/prometheus, one set per gate in
// order: good, bad, empty, or "error" for a proxy that fails), each smoke Job's outcome in order, the migrate Job's (Complete unless told),
// the creates and patches the API server refuses,
// Deployments always Ready, and the Rollout's status; for `pnpm drill --k8s`, the drill runner's
// CronJob template, its Job's log lines and the drills' Lease. Anything else it was not told about fails.
import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.FAKE_KUBECTL_DIR;
const args = process.argv.slice(2);
const stdin = args.includes("-f") ? readFileSync(0, "utf8") : "";
const scenario = JSON.parse(readFileSync(join(dir, "scenario.json"), "utf8"));
// Complete lines only: a call made at the same time (the gate's queries run in parallel) may be
// half-way through appending its own, and a reader can see the first part of that write.
const earlier = readFileSync(join(dir, "calls.jsonl"), { encoding: "utf8", flag: "a+" })
  .split("\n")
  .slice(0, -1)
  .map((line) => JSON.parse(line));
appendFileSync(join(dir, "calls.jsonl"), `${JSON.stringify({ args, stdin })}\n`);
// The gate a call belongs to: the Jobs created so far (smoke Jobs, or a drill's), a migrate Job is none.
const isCountedJob = (call) =>
  call.args.includes("create") && !/-migrate-[a-z0-9]+$/.test(JSON.parse(call.stdin).metadata?.name ?? "");
const gate = earlier.filter(isCountedJob).length - (isCountedJob({ args, stdin }) ? 0 : 1);
const migrateJob = args.find((arg) => /-migrate-[a-z0-9]+$/.test(arg));

function fail(message) {
  process.stderr.write(`${message}\n`);
  process.exit(1);
}

// A call the API server refuses (a webhook timing out, a quota): "create <Job name prefix>" or "patch <kind>/<name>".
const asked = stdin
  ? `create ${JSON.parse(stdin).metadata?.name}`
  : `${args[args.indexOf("patch")]} ${args[args.indexOf("patch") + 1]}/${args[args.indexOf("patch") + 2]}`;
if (scenario.refuse?.some((refused) => asked.startsWith(refused)))
  fail("Error from server (InternalError): Internal error occurred: failed calling webhook: context deadline exceeded");

if (args.includes("--raw")) {
  const query = new URL(`http://proxy${args[args.indexOf("--raw") + 1]}`).searchParams.get("query") ?? "";
  const set = scenario.prometheus[gate];
  if (set === "error")
    fail('Error from server (ServiceUnavailable): no endpoints available for service "prometheus-operated"');
  process.stdout.write(
    readFileSync(
      join(scenario.fixtures, `${set}-${query.includes("histogram_quantile") ? "p95" : "error-ratio"}.json`),
      "utf8",
    ),
  );
} else if (args.includes("create")) {
  process.stdout.write(`job.batch/${JSON.parse(stdin).metadata.name} created\n`);
} else if (args.includes("get") && args.includes("job") && migrateJob) {
  const outcome = scenario.migration ?? "Complete";
  process.stdout.write(
    JSON.stringify({
      status: {
        conditions: [
          {
            type: outcome,
            status: "True",
            ...(outcome === "Failed"
              ? { reason: "BackoffLimitExceeded", message: "Job has reached the specified backoff limit" }
              : {}),
          },
        ],
      },
    }),
  );
} else if (args.includes("get") && args.includes("job")) {
  process.stdout.write(JSON.stringify({ status: { conditions: [{ type: scenario.jobs[gate], status: "True" }] } }));
} else if (args.includes("get") && args.includes("lease")) {
  // The drills' Lease: none unless the scenario holds one (--ignore-not-found prints nothing).
  if (scenario.lease === "forbidden")
    fail(
      'Error from server (Forbidden): leases.coordination.k8s.io "loopguard-drill" is forbidden: User "alice@example.com" cannot get resource "leases"',
    );
  if (scenario.lease) process.stdout.write(JSON.stringify(scenario.lease));
} else if (args.includes("cronjob")) {
  process.stdout.write(JSON.stringify(scenario.cronJob));
} else if (args.includes("logs") && scenario.logs) {
  process.stdout.write(scenario.logs.map((line) => `${line}\n`).join(""));
} else if (args.includes("logs")) {
  process.stdout.write(
    scenario.jobs[gate] === "Complete"
      ? "smoke billing GetOrder: 0 of 400 calls failed, 6 allowed at a 0.5 % error rate; p95 3.1 ms → billing-preview:50062\n"
      : "smoke billing GetOrder: 131 of 400 calls failed (UNAVAILABLE × 131), 6 allowed at a 0.5 % error rate; p95 2.8 ms → billing-preview:50062\n",
  );
} else if (args.includes("get") && args.includes("deployments.apps")) {
  const ready = { observedGeneration: 2, updatedReplicas: 2, readyReplicas: 2, availableReplicas: 2 };
  process.stdout.write(JSON.stringify({ metadata: { generation: 2 }, spec: { replicas: 2 }, status: ready }));
} else if (args.includes("get") && args.includes("rollouts.argoproj.io")) {
  process.stdout.write(JSON.stringify(scenario.rollout));
} else if (args.includes("patch")) {
  process.stdout.write(`${args[args.indexOf("patch") + 1]}/${args[args.indexOf("patch") + 2]} patched\n`);
} else {
  fail(`fake kubectl: no answer for ${args.join(" ")}`);
}
