// Pieces the strict JSON Schemas of custom resources share (crd-schemas.ts, cnpg-schemas.ts).
export type Schema = Record<string, unknown>;

export const stringMap: Schema = { type: "object", additionalProperties: { type: "string" } };

export const metadata: Schema = {
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

export const quantity: Schema = { type: "string", pattern: "^[0-9]+(\\.[0-9]+)?(m|Ki|Mi|Gi|Ti)?$" };

/** A closed object: these properties only, `required` among them. */
export function closed(properties: Record<string, Schema>, required: readonly string[] = []): Schema {
  return { type: "object", additionalProperties: false, required, properties };
}

/** `{ name }`: a reference to an object (a Secret, a Cluster) in the same namespace. */
export const localReference: Schema = closed({ name: { type: "string", minLength: 1 } }, ["name"]);
