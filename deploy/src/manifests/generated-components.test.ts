import { join } from "node:path";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { describe, expect, it } from "vitest";
import { BASE_SERVICES_DIR, COMPONENTS_DIR, renderK8sFiles } from "./generated-components.js";
import { TERMINATION_GRACE_SECONDS } from "./pod-timings.js";
import { methodSlos } from "./slo-rules.js";
import { parseYamlDocuments } from "./yaml.js";

function spec(name: string, overrides: Partial<ServiceSpec>): ServiceSpec {
  return {
    name,
    packageName: `@loopguard/${name}`,
    description: "",
    kind: "tool",
    dir: `services/${name}`,
    entry: `services/${name}/dist/main.js`,
    port: 50061,
    metricsPort: 9461,
    envPrefix: name.toUpperCase().replaceAll("-", "_"),
    metricsPortEnv: `${name.toUpperCase().replaceAll("-", "_")}_METRICS_PORT`,
    stateful: false,
    secretFiles: {},
    ...overrides,
  };
}

const orchestrator = spec("orchestrator", {
  kind: "orchestrator",
  port: 50051,
  metricsPort: 8080,
  metricsPortEnv: "ORCHESTRATOR_HTTP_PORT",
  stateful: true,
  secretFiles: { LOOPGUARD_SIGNING_KEY_FILE: "loopguard-signing-key/signing-key.jwk" },
});
const kb = spec("kb-search", {});
const geo = spec("geo", {
  port: 50064,
  metricsPort: 9464,
  stateful: true,
  secretFiles: { GEO_LICENSE_FILE: "loopguard-geo-license/license" },
});

function documents(files: Map<string, string>, path: string): Record<string, any>[] {
  const text = files.get(path);
  if (text === undefined) throw new Error(`${path} not generated; have ${[...files.keys()].join(", ")}`);
  return parseYamlDocuments(text, path) as Record<string, any>[];
}

describe("renderK8sFiles", () => {
  // geo has no contract of its own here: it is judged by kb-search's SLOs and smoke call.
  const kbSlos = methodSlos([KbSearchService]);
  const files = renderK8sFiles([geo, kb, orchestrator], {
    rules: { groups: [] },
    methods: [...kbSlos, ...kbSlos.map((slo) => ({ ...slo, tool: "geo" }))],
  });

  it("gives a new tool its base objects and lists them in the base", () => {
    expect(documents(files, join(BASE_SERVICES_DIR, "geo.yaml")).map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([
      "ServiceAccount/geo",
      "Service/geo",
      "Deployment/geo",
      "NetworkPolicy/geo",
    ]);
    expect(documents(files, join(BASE_SERVICES_DIR, "kustomization.yaml"))[0]!.resources).toEqual([
      "geo.yaml",
      "kb-search.yaml",
      "orchestrator.yaml",
      "drill-runner.image.yaml",
    ]);
  });

  it("gives a new tool its ServiceMonitor, HPA and PDB, and a stateful one its SQLite volume and PostgreSQL store", () => {
    expect(documents(files, join(COMPONENTS_DIR, "monitoring", "geo.service-monitor.yaml"))[0]!.spec.endpoints).toEqual(
      [expect.objectContaining({ port: "http", path: "/metrics", interval: "15s" })],
    );
    expect(documents(files, join(COMPONENTS_DIR, "high-availability", "geo.yaml")).map((o) => o.kind)).toEqual([
      "HorizontalPodAutoscaler",
      "PodDisruptionBudget",
    ]);
    const sqlite = documents(files, join(COMPONENTS_DIR, "sqlite-volumes", "geo.patch.yaml"))[0]!;
    expect(sqlite.spec.template.spec.containers[0].env).toEqual([{ name: "GEO_STORE", value: "sqlite:/data/geo.db" }]);
    const postgres = documents(files, join(COMPONENTS_DIR, "postgres-stores", "geo.patch.yaml"))[0]!;
    expect(postgres.spec.template.spec.containers[0].env).toEqual([
      { name: "GEO_STORE_FILE", value: "/etc/loopguard/geo-store/dsn" },
      { name: "GEO_STORE_POOL_SIZE", value: "3" },
      { name: "GEO_SEED_DEMO", value: "false" },
    ]);
    expect(postgres.spec.template.spec.volumes[0]).toEqual({
      name: "loopguard-geo-store",
      secret: { secretName: "loopguard-geo-store", items: [{ key: "dsn", path: "dsn" }], defaultMode: 0o440 },
    });
    expect(files.has(join(COMPONENTS_DIR, "postgres-stores", "kb-search.patch.yaml"))).toBe(false);
  });

  it("gives a new tool its objects on both blue-green release paths, and none to the orchestrator", () => {
    expect(
      documents(files, join(COMPONENTS_DIR, "argo-rollouts", "geo.yaml")).map((o) => `${o.kind}/${o.metadata.name}`),
    ).toEqual(["Rollout/geo", "Service/geo-preview", "AnalysisTemplate/geo-slo", "Service/geo-metrics"]);
    expect(
      documents(files, join(COMPONENTS_DIR, "plain-blue-green", "geo.yaml")).map((o) => `${o.kind}/${o.metadata.name}`),
    ).toEqual(["Deployment/geo-green", "Service/geo-preview", "Service/geo-metrics"]);
    expect(documents(files, join(COMPONENTS_DIR, "plain-blue-green", "geo.blue.patch.yaml"))[0]).toContainEqual({
      op: "replace",
      path: "/metadata/name",
      value: "geo-blue",
    });
    const plain = documents(files, join(COMPONENTS_DIR, "plain-blue-green", "kustomization.yaml"))[0]!;
    expect(plain.replacements.map((r: { source: { name: string } }) => r.source.name)).toEqual([
      "geo-blue",
      "geo-green",
      "kb-search-blue",
      "kb-search-green",
    ]);
    expect(files.has(join(COMPONENTS_DIR, "argo-rollouts", "orchestrator.yaml"))).toBe(false);
    // Store patches reach every Deployment of a service, whichever its colour.
    expect(documents(files, join(COMPONENTS_DIR, "postgres-stores", "kustomization.yaml"))[0]!.patches).toContainEqual({
      path: "geo.patch.yaml",
      target: { kind: "Deployment", labelSelector: "app.kubernetes.io/name=geo" },
    });
  });

  it("points the orchestrator at the new tool's headless Service and lets it through both network policies", () => {
    const [, , deployment, policy] = documents(files, join(BASE_SERVICES_DIR, "orchestrator.yaml")) as [
      unknown,
      unknown,
      Deployment,
      NetworkPolicy,
    ];
    const env = deployment.spec!.template.spec!.containers[0]!.env!;
    expect(env).toContainEqual({ name: "GEO_ADDR", value: "dns:///geo:50064" });
    expect(env).toContainEqual({ name: "KB_SEARCH_ADDR", value: "dns:///kb-search:50061" });
    expect(policy.spec!.egress).toContainEqual({
      to: [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "geo" } } }],
      ports: [{ protocol: "TCP", port: 50064 }],
    });
    const geoPolicy = documents(files, join(BASE_SERVICES_DIR, "geo.yaml"))[3] as NetworkPolicy;
    expect(geoPolicy.spec!.ingress![0]).toEqual({
      from: [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "orchestrator" } } }],
      ports: [{ protocol: "TCP", port: 50064 }],
    });
    expect(geoPolicy.spec!.egress).toBeUndefined();
  });

  it("mounts a tool's declared secret files read-only and names them in its variables, the signing key only in the orchestrator", () => {
    const container = (name: string) =>
      (documents(files, join(BASE_SERVICES_DIR, `${name}.yaml`))[2] as Deployment).spec!.template.spec!.containers[0]!;
    expect(container("geo").env).toContainEqual({
      name: "GEO_LICENSE_FILE",
      value: "/etc/loopguard/geo-license/license",
    });
    expect(container("geo").volumeMounts).toContainEqual({
      name: "loopguard-geo-license",
      mountPath: "/etc/loopguard/geo-license",
      readOnly: true,
    });
    expect(container("geo").env!.map((e) => e.name)).not.toContain("LOOPGUARD_SIGNING_KEY_FILE");
    expect(container("orchestrator").env).toContainEqual({
      name: "LOOPGUARD_SIGNING_KEY_FILE",
      value: "/etc/loopguard/signing-key/signing-key.jwk",
    });
    for (const name of ["geo", "kb-search", "orchestrator"])
      expect(container(name).env).toContainEqual({
        name: "LOOPGUARD_JWKS_FILE",
        value: "/etc/loopguard/jwks/jwks.json",
      });
  });

  it("gives the pod time for preStop and the whole drain before SIGKILL", () => {
    const deployment = documents(files, join(BASE_SERVICES_DIR, "kb-search.yaml"))[2] as Deployment;
    const pod = deployment.spec!.template.spec!;
    const container = pod.containers[0]!;
    const graceMs = Number(container.env!.find((e) => e.name === "KB_SEARCH_SHUTDOWN_GRACE_MS")!.value);
    expect(pod.terminationGracePeriodSeconds).toBe(TERMINATION_GRACE_SECONDS);
    expect(TERMINATION_GRACE_SECONDS).toBeGreaterThan(
      container.lifecycle!.preStop!.sleep!.seconds + (2 * graceMs) / 1000,
    );
  });
});
