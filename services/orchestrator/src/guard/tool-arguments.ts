// Parse → schema-validate step of the execution pipeline: turns the raw argument text a policy
// produced into a request message, or into an EINVAL observation the next step can correct
// (DESIGN, principle 2). Field names in violations are the JSON names the model was shown.
import { type DescField, type DescMessage, fromJson, type JsonValue, type Message } from "@bufbuild/protobuf";
import { redactText, violationsOf } from "@loopguard/tool-sdk";
import { MAX_ARGUMENTS_DEPTH, nestedDeeperThan } from "../session/model-bounds.js";
import type { RegisteredTool } from "../tool-registry.js";

export interface ArgumentViolation {
  /** JSON path as the model names it, e.g. "itemCount" or "items[2].sku". */
  readonly field: string;
  readonly description: string;
}

export type ParsedArguments =
  | { readonly ok: true; readonly message: Message }
  | { readonly ok: false; readonly code: "EINVAL"; readonly message: string; readonly violations: ArgumentViolation[] };

type Invalid = Extract<ParsedArguments, { ok: false }>;

/** Never throws: every failure is an EINVAL result. */
export function parseToolArguments(tool: RegisteredTool, raw: string): ParsedArguments {
  const json = argumentsJson(raw);
  return json.ok ? decodeToolArguments(tool, json.value) : json;
}

/** The first step alone: the raw text as JSON, or the EINVAL it is not valid JSON or nests too deep. */
export function argumentsJson(raw: string): { readonly ok: true; readonly value: unknown } | Invalid {
  // Before parsing: what the host does with a value after it (decode, validate, redact) recurses.
  if (nestedDeeperThan(raw, MAX_ARGUMENTS_DEPTH))
    return invalid(`arguments nested deeper than ${MAX_ARGUMENTS_DEPTH}`, []);
  try {
    return { ok: true, value: JSON.parse(raw) };
  } catch (e) {
    return invalid(`arguments are not valid JSON: ${jsonErrorText(e)}`, []);
  }
}

/** The rest: parsed JSON into the request message, checked against the contract's rules. */
export function decodeToolArguments(tool: RegisteredTool, value: unknown): ParsedArguments {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return invalid(`arguments must be a JSON object, got ${jsonKind(value)}`, []);
  }
  const args = value as { [key: string]: JsonValue };
  const input = tool.method.input;

  // Unknown keys and the host-owned key are reported together with every other problem.
  const keyViolations: ArgumentViolation[] = [];
  const accepted: { [key: string]: JsonValue } = {};
  for (const [key, v] of Object.entries(args)) {
    const violation = keyViolation(tool, key);
    if (violation) keyViolations.push(violation);
    else accepted[key] = v;
  }

  let message: Message;
  try {
    message = fromJson(input, accepted, { ignoreUnknownFields: false });
  } catch (e) {
    return invalidFields(tool, [...keyViolations, ...undecodable(tool, accepted, e)]);
  }
  let violations: ArgumentViolation[];
  try {
    violations = ruleViolations(tool, message);
  } catch (e) {
    return invalid(`arguments for ${tool.name} could not be validated: ${errorText(e)}`, []);
  }
  if (keyViolations.length + violations.length > 0) return invalidFields(tool, [...keyViolations, ...violations]);
  return { ok: true, message };
}

/** The contract's rules (protovalidate), named by JSON path; throws only if a rule cannot be evaluated. */
function ruleViolations(tool: RegisteredTool, message: Message): ArgumentViolation[] {
  const input = tool.method.input;
  return (
    violationsOf(input, message)
      .map((v) => ({ field: jsonPath(input, v.field), description: v.description }))
      // Host-owned fields are still empty here: the host sets them after this step.
      .filter((v) => ![...tool.hostFields].some((f) => isUnder(v.field, f)))
  );
}

/**
 * fromJson stops at the first bad value and names it by its protobuf type. Decoding each key
 * on its own names every bad one the way the model wrote it; the rest are then checked
 * against the rules too, so one observation tells the model everything to fix.
 */
function undecodable(
  tool: RegisteredTool,
  accepted: { readonly [key: string]: JsonValue },
  error: unknown,
): ArgumentViolation[] {
  const input = tool.method.input;
  const bad = Object.entries(accepted).flatMap(([key, v]) => decodeViolation(tool, key, v));
  // Keys that decode alone but not together (two members of one oneof) have no single culprit.
  if (bad.length === 0) return [{ field: "(arguments)", description: decodeDetail(error) }];
  const named = new Set(bad.map((v) => v.field));
  const rest = Object.fromEntries(
    Object.entries(accepted).filter(([key]) => !named.has(fieldByKey(input, key)?.jsonName ?? key)),
  );
  try {
    const others = ruleViolations(tool, fromJson(input, rest, { ignoreUnknownFields: false }));
    return [...bad, ...others.filter((v) => !named.has(v.field.split(/[.[]/, 1)[0] ?? ""))];
  } catch {
    return bad;
  }
}

function keyViolation(tool: RegisteredTool, key: string): ArgumentViolation | undefined {
  const field = fieldByKey(tool.method.input, key);
  if (field && tool.hostFields.has(field.jsonName)) {
    return { field: field.jsonName, description: "is set by the host; leave it out" };
  }
  if (field) return undefined;
  const known = Object.keys(propertiesOf(tool));
  return { field: key, description: `unknown field; expected one of: ${known.join(", ")}` };
}

function decodeViolation(tool: RegisteredTool, key: string, value: JsonValue): ArgumentViolation[] {
  const input = tool.method.input;
  try {
    fromJson(input, { [key]: value }, { ignoreUnknownFields: false });
    return [];
  } catch {
    const name = fieldByKey(input, key)?.jsonName ?? key;
    // Masked before it is cut short: a cut can leave part of a number no redactor recognises.
    const shown = redactText(jsonText(value));
    const got = shown.length > 60 ? `${shown.slice(0, 57)}...` : shown;
    return [{ field: name, description: `expected ${expectedValue(propertiesOf(tool)[name])}, got ${got}` }];
  }
}

/** fromJson's reason without its "cannot decode field loopguard.x.v1.Y.z from JSON: " preamble. */
function decodeDetail(e: unknown): string {
  return errorText(e).replace(/^cannot decode .*? from JSON: /, "");
}

/** protobuf JSON accepts the JSON name and the proto name of a field. */
function fieldByKey(message: DescMessage, key: string): DescField | undefined {
  return message.fields.find((f) => f.jsonName === key || f.name === key);
}

function propertiesOf(tool: RegisteredTool): { readonly [name: string]: JsonValue | undefined } {
  const properties = tool.spec.parameters.properties;
  return typeof properties === "object" && properties !== null && !Array.isArray(properties) ? properties : {};
}

/** What the model-visible schema asks for, in words: the model is told in its own vocabulary. */
function expectedValue(schema: JsonValue | undefined): string {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) return "a valid value";
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.join(", ")}`;
  const { minimum, maximum } = schema;
  switch (schema.type) {
    case "integer":
      if (typeof minimum === "number" && typeof maximum === "number") return `an integer from ${minimum} to ${maximum}`;
      if (typeof minimum === "number") return `an integer of at least ${minimum}`;
      return "an integer";
    case "number":
      return "a number";
    case "string":
      return "a string";
    case "boolean":
      return "true or false";
    case "array":
      return "an array";
    default:
      return "an object";
  }
}

/** "item_id" → "itemId", "hits[0].item_id" → "hits[0].itemId", following the message types. */
function jsonPath(message: DescMessage, protoPath: string): string {
  if (protoPath.startsWith("(")) return protoPath; // "(message)": a rule over the whole request
  let current: DescMessage | undefined = message;
  return protoPath.replace(/(\[[^\]]*\])|([A-Za-z_][A-Za-z0-9_]*)/g, (whole, subscript: string | undefined) => {
    if (subscript) return subscript;
    const field = current?.fields.find((f) => f.name === whole);
    current = field?.message;
    return field?.jsonName ?? whole;
  });
}

function isUnder(path: string, field: string | undefined): boolean {
  return field !== undefined && (path === field || path.startsWith(`${field}.`) || path.startsWith(`${field}[`));
}

function invalidFields(tool: RegisteredTool, violations: ArgumentViolation[]): ParsedArguments {
  const list = violations.map((v) => `${v.field}: ${v.description}`).join("; ");
  return invalid(`invalid arguments for ${tool.name}: ${list}`, violations);
}

function invalid(message: string, violations: ArgumentViolation[]): Invalid {
  return { ok: false, code: "EINVAL", message, violations };
}

function jsonKind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

/** A value's JSON, or a note when it cannot be written (argumentsJson bounds the depth; this holds whatever comes). */
function jsonText(value: JsonValue): string {
  try {
    return JSON.stringify(value);
  } catch {
    return "a value that cannot be shown";
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * JSON.parse's reason without the excerpt of the input V8 quotes (`Unexpected token '(',
 * ..."phone":(139)12345"... is not valid JSON`): the excerpt can cut a phone or an id card
 * mid-number, where no redactor can recognise it.
 */
function jsonErrorText(e: unknown): string {
  return errorText(e).replace(/, (?:\.\.\.)?"[\s\S]*$/, "");
}
