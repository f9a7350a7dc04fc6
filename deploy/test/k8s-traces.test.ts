// The orchestrator's step-trace files fit the volume they are written to, in every rendering:
// the cap (ORCHESTRATOR_TRACE_TOTAL_BYTES, or its default) stays at or under half of /data — an
// emptyDir's sizeLimit, or a PVC's request in dev — since the kubelet evicts a pod whose emptyDir
// passes its limit, and the rest of /data (the SQLite store in dev) needs room too.
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DEFAULT_TRACE_RETENTION } from "@loopguard/orchestrator";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { PersistentVolumeClaim } from "kubernetes-types/core/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { renderAll, type Rendering } from "../src/manifests/renderings.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

const UNITS: Record<string, number> = { "": 1, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };

function bytes(quantity: string): number {
  const match = /^(\d+)(Ki|Mi|Gi|Ti)?$/.exec(quantity);
  expect(match, `a quantity in binary units: ${quantity}`).not.toBeNull();
  return Number(match![1]) * UNITS[match![2] ?? ""]!;
}

describe("the orchestrator's step traces", () => {
  it("are capped at or under half of the /data volume in every rendering", () => {
    for (const { name, objects } of renderings) {
      const deployments = objects.filter(
        (o) => o.kind === "Deployment" && o.metadata.name === "orchestrator",
      ) as unknown as Deployment[];
      expect(deployments, name).toHaveLength(1);
      const pod = deployments[0]!.spec!.template.spec!;
      const container = pod.containers.find((c) => c.name === "orchestrator")!;
      const mount = container.volumeMounts?.find((m) => m.mountPath === "/data");
      const volume = pod.volumes?.find((v) => v.name === mount?.name);
      const claim = objects.find(
        (o) => o.kind === "PersistentVolumeClaim" && o.metadata.name === volume?.persistentVolumeClaim?.claimName,
      ) as PersistentVolumeClaim | undefined;
      const size = volume?.emptyDir?.sizeLimit ?? claim?.spec?.resources?.requests?.storage;
      expect(size, `${name}: /data has a size`).toBeDefined();
      const cap = Number(
        container.env?.find((e) => e.name === "ORCHESTRATOR_TRACE_TOTAL_BYTES")?.value ??
          DEFAULT_TRACE_RETENTION.totalBytes,
      );
      expect(cap, `${name}: trace cap against /data of ${String(size)}`).toBeLessThanOrEqual(bytes(String(size)) / 2);
    }
  });
});
