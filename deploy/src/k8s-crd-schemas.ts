// Strict JSON Schemas of the custom resources no typed package covers, limited to the fields
// the manifests use: anything else (a misspelling, a field of another version) is refused
// rather than ignored, as the apiserver's pruning would silently do.
export type Schema = Record<string, unknown>;

const stringMap: Schema = { type: "object", additionalProperties: { type: "string" } };

const metadata: Schema = {
  type: "object",
  additionalProperties: false,
  required: ["name"],
  properties: {
    name: { type: "string", pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength: 63 },
    namespace: { type: "string" },
    labels: stringMap,
    annotations: stringMap,
  },
};

const quantity: Schema = { type: "string", pattern: "^[0-9]+(\\.[0-9]+)?(m|Ki|Mi|Gi|Ti)?$" };

/** CloudNativePG `Cluster` (postgresql.cnpg.io/v1). */
const cnpgCluster: Schema = {
  type: "object",
  additionalProperties: false,
  required: ["apiVersion", "kind", "metadata", "spec"],
  properties: {
    apiVersion: { const: "postgresql.cnpg.io/v1" },
    kind: { const: "Cluster" },
    metadata,
    spec: {
      type: "object",
      additionalProperties: false,
      required: ["instances", "storage"],
      properties: {
        instances: { type: "integer", minimum: 1 },
        imageName: { type: "string", minLength: 1 },
        primaryUpdateStrategy: { enum: ["unsupervised", "supervised"] },
        storage: {
          type: "object",
          additionalProperties: false,
          required: ["size"],
          properties: { size: quantity, storageClass: { type: "string" } },
        },
        bootstrap: {
          type: "object",
          additionalProperties: false,
          properties: {
            initdb: {
              type: "object",
              additionalProperties: false,
              required: ["database", "owner"],
              properties: {
                database: { type: "string", minLength: 1 },
                owner: { type: "string", minLength: 1 },
                secret: { type: "object", additionalProperties: false, required: ["name"], properties: { name: { type: "string", minLength: 1 } } },
              },
            },
          },
        },
        postgresql: { type: "object", additionalProperties: false, properties: { parameters: stringMap } },
        resources: {
          type: "object",
          additionalProperties: false,
          properties: {
            requests: { type: "object", additionalProperties: false, properties: { cpu: quantity, memory: quantity } },
            limits: { type: "object", additionalProperties: false, properties: { cpu: quantity, memory: quantity } },
          },
        },
        affinity: {
          type: "object",
          additionalProperties: false,
          properties: { enablePodAntiAffinity: { type: "boolean" }, topologyKey: { type: "string" } },
        },
        monitoring: { type: "object", additionalProperties: false, properties: { enablePodMonitor: { type: "boolean" } } },
      },
    },
  },
};

const labelName: Schema = { type: "string", pattern: "^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", maxLength: 316 };

/** Chaos Mesh `PodChaos` (chaos-mesh.org/v1alpha1), the pod-kill drills. */
const podChaos: Schema = {
  type: "object",
  additionalProperties: false,
  required: ["apiVersion", "kind", "metadata", "spec"],
  properties: {
    apiVersion: { const: "chaos-mesh.org/v1alpha1" },
    kind: { const: "PodChaos" },
    metadata: { ...metadata, required: ["name", "namespace"] },
    spec: {
      type: "object",
      additionalProperties: false,
      required: ["action", "mode", "selector"],
      properties: {
        action: { enum: ["pod-kill", "pod-failure", "container-kill"] },
        mode: { enum: ["one", "all", "fixed", "fixed-percent", "random-max-percent"] },
        value: { type: "string" },
        selector: {
          type: "object",
          additionalProperties: false,
          // Without `namespaces` Chaos Mesh picks pods in the object's own namespace: the shipped kills name none.
          required: ["labelSelectors"],
          properties: {
            namespaces: { type: "array", minItems: 1, items: { type: "string", minLength: 1 } },
            labelSelectors: { type: "object", minProperties: 1, propertyNames: labelName, additionalProperties: { type: "string" } },
          },
        },
        gracePeriod: { type: "integer", minimum: 0 },
        duration: { type: "string", pattern: "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$" },
      },
    },
  },
};

/** "apiVersion/Kind" → its schema. */
export const CRD_SCHEMAS: Readonly<Record<string, Schema>> = {
  "postgresql.cnpg.io/v1/Cluster": cnpgCluster,
  "chaos-mesh.org/v1alpha1/PodChaos": podChaos,
};
