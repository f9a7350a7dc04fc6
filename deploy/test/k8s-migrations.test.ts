// The migration step in every rendering: no serving container of a stateful service migrates
// (<PREFIX>_MIGRATE_ON_START=false); with PostgreSQL a Job per service runs `migrate` from the
// image the service's pods run, and every Deployment of the service (both colours, the Rollout's
// template) waits in an init container until the schema is current, with the same store and
// secrets as the serving container; with SQLite the pod migrates its own file first.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { Job } from "kubernetes-types/batch/v1.js";
import type { Container } from "kubernetes-types/core/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderAll, type Rendering } from "../src/manifests/renderings.js";
import { POSTGRES_CLIENT_LABEL } from "../src/manifests/cluster-names.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const stateful = discoverServices(join(root, "services")).filter((s) => s.stateful);

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

const deploymentsOf = (r: Rendering, service: string) =>
  r.objects.filter(
    (o): o is K8sObject & Deployment =>
      o.kind === "Deployment" && o.metadata.labels?.["app.kubernetes.io/name"] === service,
  );
const jobsOf = (r: Rendering) =>
  r.objects.filter(
    (o): o is K8sObject & Job => o.kind === "Job" && o.metadata.labels?.["app.kubernetes.io/component"] === "migration",
  );
const envOf = (c: Container | undefined, name: string) => c?.env?.find((e) => e.name === name);
// The service's own secrets; not the JWKS nor a tool's call key, which only answering calls needs.
const secretMounts = (c: Container | undefined) =>
  (c?.volumeMounts ?? [])
    .filter(
      (m) =>
        m.mountPath.startsWith("/etc/loopguard/") &&
        !m.mountPath.endsWith("/jwks") &&
        !m.mountPath.startsWith("/etc/loopguard/call-keys-"),
    )
    .map((m) => m.mountPath)
    .sort();
/**
 * What of the serving container's secret mounts a schema step holds: its store's CA, and the files
 * its schema commands read (schemaSecretFiles: risk's pepper); never the orchestrator's keys.
 */
const schemaMounts = (serving: Container, spec: ServiceSpec) => {
  const variables = [...(spec.schemaSecretFiles ?? []), `${spec.envPrefix}_STORE_FILE`];
  const dirs = variables.flatMap((variable) => {
    const file = envOf(serving, variable)?.value;
    return file ? [dirname(file)] : [];
  });
  return secretMounts(serving).filter((path) => path.endsWith("/postgres-ca") || dirs.includes(path));
};
/** How a container names its store: the URL, or the file holding it (a DSN Secret's mount). */
const storeOf = (c: Container | undefined, spec: ServiceSpec) => [
  envOf(c, `${spec.envPrefix}_STORE`),
  envOf(c, `${spec.envPrefix}_STORE_FILE`),
];

describe("migration step", () => {
  it("renders in every overlay a serving container of each stateful service that never migrates, after a schema step with its store", () => {
    expect(stateful.map((s) => s.name).sort()).toEqual(["billing", "orchestrator", "risk"]);
    for (const rendering of renderings) {
      const postgres = rendering.name.startsWith("overlays/prod");
      for (const spec of stateful) {
        const deployments = deploymentsOf(rendering, spec.name);
        expect(deployments.length, `${rendering.name}: ${spec.name}`).toBeGreaterThan(0);
        for (const deployment of deployments) {
          const pod = deployment.spec!.template.spec!;
          const serving = pod.containers.find((c) => c.name === spec.name)!;
          const where = `${rendering.name}: ${deployment.metadata!.name}`;
          expect(envOf(serving, `${spec.envPrefix}_MIGRATE_ON_START`)?.value, where).toBe("false");
          expect(
            pod.initContainers?.map((c) => [c.name, c.args]),
            where,
          ).toEqual([
            postgres ? ["wait-for-schema", ["wait-for-schema", "--timeout", "900"]] : ["migrate", ["migrate"]],
          ]);
          const init = pod.initContainers![0]!;
          expect(init.image, where).toBe(serving.image);
          expect(storeOf(init, spec), where).toEqual(storeOf(serving, spec));
          // Risk seeds its demo customers in a migration: the step and the pod must agree on whether it does.
          expect(envOf(init, `${spec.envPrefix}_SEED_DEMO`), where).toEqual(
            envOf(serving, `${spec.envPrefix}_SEED_DEMO`),
          );
          expect(secretMounts(init), where).toEqual(schemaMounts(serving, spec));
          expect(init.securityContext, where).toMatchObject({
            runAsNonRoot: true,
            readOnlyRootFilesystem: true,
            allowPrivilegeEscalation: false,
          });
        }
      }
    }
  });

  it("runs `migrate` once per stateful service in a Job from the image its pods run, only where the store is PostgreSQL", () => {
    for (const rendering of renderings) {
      const jobs = jobsOf(rendering);
      if (!rendering.name.startsWith("overlays/prod")) {
        expect(jobs, rendering.name).toEqual([]);
        continue;
      }
      expect(jobs.map((j) => j.metadata!.name).sort(), rendering.name).toEqual(
        stateful.map((s) => `${s.name}-migrate`).sort(),
      );
      for (const spec of stateful) {
        const job = jobs.find((j) => j.metadata!.name === `${spec.name}-migrate`)!;
        const pod = job.spec!.template.spec!;
        const migrate = pod.containers[0]!;
        const serving = deploymentsOf(rendering, spec.name)[0]!.spec!.template.spec!.containers.find(
          (c) => c.name === spec.name,
        )!;
        const where = `${rendering.name}: job/${job.metadata!.name}`;
        expect(migrate.args, where).toEqual(["migrate"]);
        expect(migrate.image, where).toBe(serving.image);
        expect(storeOf(migrate, spec), where).toEqual(storeOf(serving, spec));
        expect(envOf(migrate, `${spec.envPrefix}_SEED_DEMO`), where).toEqual(
          envOf(serving, `${spec.envPrefix}_SEED_DEMO`),
        );
        expect(secretMounts(migrate), where).toEqual(schemaMounts(serving, spec));
        expect(job.spec!.template.metadata!.labels![POSTGRES_CLIENT_LABEL], where).toBe("true");
        // Not selected by the service's Service, PDB or autoscaler.
        expect(job.spec!.template.metadata!.labels!["app.kubernetes.io/name"], where).not.toBe(spec.name);
        expect(job.spec!.backoffLimit, where).toBeLessThanOrEqual(1);
        expect(job.spec!.activeDeadlineSeconds, where).toBeGreaterThan(0);
        expect(pod.restartPolicy, where).toBe("Never");
      }
    }
  });
});
