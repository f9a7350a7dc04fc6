// Strict JSON Schemas of the custom resources no typed package covers, limited to the fields
// the manifests use: anything else (a misspelling, a field of another version) is refused
// rather than ignored, as the apiserver's pruning would silently do.
import { CNPG_SCHEMAS } from "./cnpg-schemas.js";
import { metadata, type Schema } from "./schema-parts.js";

const labelName: Schema = {
  type: "string",
  pattern: "^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
  maxLength: 316,
};

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
            labelSelectors: {
              type: "object",
              minProperties: 1,
              propertyNames: labelName,
              additionalProperties: { type: "string" },
            },
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
  ...CNPG_SCHEMAS,
  "chaos-mesh.org/v1alpha1/PodChaos": podChaos,
};
