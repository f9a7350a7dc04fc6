// The model-visible JSON Schema of a request message, derived from its descriptor and its
// protovalidate (buf.validate) rules, so the model is shown the contract the tool enforces.
//
// Hand-written on purpose: no maintained library maps protovalidate rules to JSON Schema from
// protobuf-es v2 descriptors at run time. The generators that exist are build-time protoc
// plugins written in Go (e.g. cerbos/protoc-gen-jsonschema): they would add a Go toolchain and
// a second generated artefact to keep in step, and cannot make the model-facing choices made
// here (leave out the host-owned idempotency key, hide enum value 0).
//
// The schema is as strict as the rules or stricter, never looser, with one gap: CEL rules
// (e.g. the id card's GB 11643 check character) cannot be expressed, so they surface only as
// EINVAL observations from the protovalidate pass in tool-arguments.ts.
import { type DescEnum, type DescField, type DescMessage, ScalarType, create, getOption } from "@bufbuild/protobuf";
import {
  type FieldRules,
  Ignore,
  field as fieldRulesOption,
} from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { violationsOf } from "@loopguard/tool-sdk";
import type { JsonObject, JsonValue } from "../store/session-store.js";

export interface RequestSchemaOptions {
  /** Fields to leave out, by JSON name (e.g. "idempotencyKey"): values the host fills in. */
  readonly omit?: readonly string[];
}

export function requestSchema(message: DescMessage, options: RequestSchemaOptions = {}): JsonObject {
  return objectSchema(message, new Set(options.omit ?? []), new Set());
}

function objectSchema(message: DescMessage, omit: ReadonlySet<string>, enclosing: ReadonlySet<string>): JsonObject {
  const inside = new Set(enclosing).add(message.typeName);
  const properties: JsonObject = {};
  const fields = message.fields.filter((f) => !omit.has(f.jsonName));
  for (const f of fields) {
    properties[f.jsonName] = fieldSchema(f, inside);
  }
  const zeroRejected = fieldsRejectingZero(message);
  return {
    type: "object",
    properties,
    required: fields.filter((f) => zeroRejected.has(f.name)).map((f) => f.jsonName),
    additionalProperties: false,
  };
}

/**
 * Required = the rules reject the field's zero value (min_len ≥ 1, gte ≥ 1, not_in [0],
 * required = true, a pattern "" does not match, a CEL rule …). Asking protovalidate about an
 * empty message answers that exactly, for every kind of rule, instead of re-deriving it.
 */
function fieldsRejectingZero(message: DescMessage): ReadonlySet<string> {
  const names = violationsOf(message, create(message)).map((v) => v.field.split(/[.[]/, 1)[0] ?? "");
  return new Set(names);
}

function rulesOf(f: DescField): FieldRules | undefined {
  const rules = getOption(f, fieldRulesOption);
  return rules.ignore === Ignore.ALWAYS ? undefined : rules;
}

function fieldSchema(f: DescField, enclosing: ReadonlySet<string>): JsonObject {
  const rules = rulesOf(f);
  switch (f.fieldKind) {
    case "scalar":
    case "enum":
    case "message":
      return elementSchema(f, rules, enclosing);
    case "list": {
      const repeated = rules?.type.case === "repeated" ? rules.type.value : undefined;
      const schema: JsonObject = { type: "array", items: elementSchema(f, repeated?.items, enclosing) };
      if (repeated?.minItems) schema.minItems = Number(repeated.minItems);
      if (repeated?.maxItems) schema.maxItems = Number(repeated.maxItems);
      if (repeated?.unique) schema.uniqueItems = true;
      return schema;
    }
    case "map": {
      const map = rules?.type.case === "map" ? rules.type.value : undefined;
      const schema: JsonObject = { type: "object", additionalProperties: elementSchema(f, map?.values, enclosing) };
      if (map?.minPairs) schema.minProperties = Number(map.minPairs);
      if (map?.maxPairs) schema.maxProperties = Number(map.maxPairs);
      return schema;
    }
  }
}

/** A field, a list's item or a map's value: exactly one of a scalar, an enum or a message. */
type Element =
  | { readonly scalar: ScalarType; readonly enum: undefined; readonly message: undefined }
  | { readonly scalar: undefined; readonly enum: DescEnum; readonly message: undefined }
  | { readonly scalar: undefined; readonly enum: undefined; readonly message: DescMessage };

function elementSchema(e: Element, rules: FieldRules | undefined, enclosing: ReadonlySet<string>): JsonObject {
  if (e.scalar !== undefined) return scalarSchema(e.scalar, rules);
  if (e.enum !== undefined) return enumSchema(e.enum, rules);
  return messageSchema(e.message, enclosing);
}

/** Well-known types have a JSON form of their own (protobuf JSON mapping), not their fields. */
const wellKnownSchemas: Readonly<Record<string, JsonObject>> = {
  "google.protobuf.Timestamp": { type: "string", format: "date-time" },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$" },
  "google.protobuf.FieldMask": { type: "string" },
  "google.protobuf.Struct": { type: "object" },
  "google.protobuf.Value": {},
  "google.protobuf.ListValue": { type: "array" },
  "google.protobuf.Any": { type: "object", properties: { "@type": { type: "string" } }, required: ["@type"] },
  "google.protobuf.Empty": { type: "object", additionalProperties: false },
  "google.protobuf.DoubleValue": { type: "number" },
  "google.protobuf.FloatValue": { type: "number" },
  "google.protobuf.Int64Value": { type: "integer" },
  "google.protobuf.UInt64Value": { type: "integer", minimum: 0 },
  "google.protobuf.Int32Value": { type: "integer", minimum: -2147483648, maximum: 2147483647 },
  "google.protobuf.UInt32Value": { type: "integer", minimum: 0, maximum: 4294967295 },
  "google.protobuf.BoolValue": { type: "boolean" },
  "google.protobuf.StringValue": { type: "string" },
  "google.protobuf.BytesValue": { type: "string", contentEncoding: "base64" },
};

function messageSchema(message: DescMessage, enclosing: ReadonlySet<string>): JsonObject {
  const wellKnown = wellKnownSchemas[message.typeName];
  if (wellKnown) return structuredClone(wellKnown);
  // A recursive message is cut at its second occurrence: the rules still apply server-side.
  if (enclosing.has(message.typeName)) return { type: "object" };
  return objectSchema(message, new Set(), enclosing);
}

/** Value ranges of the integer types whose bounds are exact JSON numbers. */
const integerRanges: Partial<Record<ScalarType, readonly [number, number]>> = {
  [ScalarType.INT32]: [-2147483648, 2147483647],
  [ScalarType.SINT32]: [-2147483648, 2147483647],
  [ScalarType.SFIXED32]: [-2147483648, 2147483647],
  [ScalarType.UINT32]: [0, 4294967295],
  [ScalarType.FIXED32]: [0, 4294967295],
};

function scalarSchema(scalar: ScalarType, rules: FieldRules | undefined): JsonObject {
  const type = rules?.type;
  switch (scalar) {
    case ScalarType.STRING:
      return stringSchema(type?.case === "string" ? type.value : undefined);
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.BOOL: {
      const schema: JsonObject = { type: "boolean" };
      if (type?.case === "bool" && type.value.const) schema.const = true;
      return schema;
    }
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return withNumericRules(
        { type: "number" },
        type?.case === "double" || type?.case === "float" ? type.value : undefined,
        false,
      );
    default: {
      const schema: JsonObject = { type: "integer" };
      const range = integerRanges[scalar];
      if (range) [schema.minimum, schema.maximum] = range;
      else if (scalar === ScalarType.UINT64 || scalar === ScalarType.FIXED64) schema.minimum = 0;
      return withNumericRules(schema, integerRules(type), true);
    }
  }
}

type NumberLike = number | bigint;
interface NumericRules {
  readonly const: NumberLike;
  readonly lessThan: { readonly case: "lt" | "lte"; readonly value: NumberLike } | { readonly case: undefined };
  readonly greaterThan: { readonly case: "gt" | "gte"; readonly value: NumberLike } | { readonly case: undefined };
  readonly in: readonly NumberLike[];
  readonly notIn: readonly NumberLike[];
}

const integerRuleCases = new Set([
  "int32",
  "int64",
  "uint32",
  "uint64",
  "sint32",
  "sint64",
  "fixed32",
  "fixed64",
  "sfixed32",
  "sfixed64",
]);

function integerRules(type: FieldRules["type"] | undefined): NumericRules | undefined {
  if (!type?.case || !integerRuleCases.has(type.case)) return undefined;
  // Every integer rule message has this shape; only the number type (number | bigint) differs.
  return type.value as NumericRules;
}

/**
 * Integer bounds are tightened to inclusive ones (gt 0 → minimum 1), the form models follow
 * best; a rule bound only narrows the type's own range, never widens it.
 */
function withNumericRules(schema: JsonObject, rules: NumericRules | undefined, integer: boolean): JsonObject {
  if (!rules) return schema;
  const step = integer ? 1 : 0;
  const gt = rules.greaterThan;
  if (gt.case === "gte" || (gt.case === "gt" && integer)) {
    const min = Number(gt.value) + (gt.case === "gt" ? step : 0);
    schema.minimum = Math.max(min, typeof schema.minimum === "number" ? schema.minimum : -Infinity);
  } else if (gt.case === "gt") {
    schema.exclusiveMinimum = Number(gt.value);
  }
  const lt = rules.lessThan;
  if (lt.case === "lte" || (lt.case === "lt" && integer)) {
    const max = Number(lt.value) - (lt.case === "lt" ? step : 0);
    schema.maximum = Math.min(max, typeof schema.maximum === "number" ? schema.maximum : Infinity);
  } else if (lt.case === "lt") {
    schema.exclusiveMaximum = Number(lt.value);
  }
  if (rules.in.length > 0) schema.enum = rules.in.map(Number);
  if (rules.notIn.length > 0) schema.not = { enum: rules.notIn.map(Number) };
  if (Number(rules.const) !== 0) schema.const = Number(rules.const);
  return schema;
}

function stringSchema(rules: Extract<FieldRules["type"], { case: "string" }>["value"] | undefined): JsonObject {
  const schema: JsonObject = { type: "string" };
  if (!rules) return schema;
  if (rules.len > 0n) {
    schema.minLength = Number(rules.len);
    schema.maxLength = Number(rules.len);
  } else {
    if (rules.minLen > 0n) schema.minLength = Number(rules.minLen);
    if (rules.maxLen > 0n) schema.maxLength = Number(rules.maxLen);
  }
  // protovalidate patterns are RE2; the ones a JSON Schema consumer (ECMA-262) cannot read
  // are left to the server-side check rather than shown wrong.
  if (rules.pattern && isEcmaRegExp(rules.pattern)) schema.pattern = rules.pattern;
  if (rules.in.length > 0) schema.enum = [...rules.in];
  if (rules.notIn.length > 0) schema.not = { enum: [...rules.notIn] };
  if (rules.const) schema.const = rules.const;
  const format = rules.wellKnown.case ? stringFormats[rules.wellKnown.case] : undefined;
  if (format && rules.wellKnown.value) schema.format = format;
  return schema;
}

const stringFormats: Readonly<Partial<Record<string, string>>> = {
  email: "email",
  hostname: "hostname",
  ipv4: "ipv4",
  ipv6: "ipv6",
  uri: "uri",
  uriRef: "uri-reference",
  uuid: "uuid",
};

function isEcmaRegExp(pattern: string): boolean {
  try {
    new RegExp(pattern, "u");
    return true;
  } catch {
    return false;
  }
}

/**
 * Enums in their JSON form: value names. Value 0 is never offered — it means "unspecified" by
 * convention, and leaving the field out yields it anyway.
 */
function enumSchema(desc: DescEnum, rules: FieldRules | undefined): JsonObject {
  const enumRules = rules?.type.case === "enum" ? rules.type.value : undefined;
  const allowed = desc.values.filter(
    (v) =>
      v.number !== 0 &&
      (!enumRules?.in.length || enumRules.in.includes(v.number)) &&
      !enumRules?.notIn.includes(v.number) &&
      (!enumRules?.const || enumRules.const === v.number),
  );
  const names: JsonValue[] = allowed.map((v) => v.name);
  return { type: "string", enum: names };
}
