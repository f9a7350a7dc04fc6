// A Connect request's JSON body checked against the method's input message before Connect decodes
// it, so every refusal is INVALID_ARGUMENT REQUEST_INVALID naming what is wrong: not JSON (the
// parser's reason without its excerpt), not an object, a field the message lacks, a value of the
// wrong type, a value of the right type the field cannot hold (fromJson's reason), each named in a
// BadRequest violation by its path (budget.max_tokens).
import { type DescField, type DescMessage, fromJson, type JsonValue, ScalarType } from "@bufbuild/protobuf";
import { type FieldViolation, status, ToolError } from "../errors.js";
import { redactText } from "../pii.js";

const JSON_TYPE_OF_SCALAR: Partial<Record<ScalarType, string>> = {
  [ScalarType.STRING]: "a string",
  [ScalarType.BOOL]: "true or false",
  [ScalarType.BYTES]: "base64 text",
};

/** How a value that did not decode should have been written. */
function expected(field: DescField): string {
  if (field.fieldKind === "scalar") return `must be ${JSON_TYPE_OF_SCALAR[field.scalar] ?? "a number"}`;
  if (field.fieldKind === "list") return "must be a list";
  if (field.fieldKind === "enum") return "must be one of the enum's value names";
  return "must be an object";
}

const NUMBER_TEXT = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const isObject = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value);
/** google.protobuf's messages have JSON forms of their own (a Timestamp is a string). */
const wellKnown = (message: DescMessage) => message.typeName.startsWith("google.protobuf.");

/** Whether `value` has the JSON type `field` takes, so that fromJson's reason says more than expected(). */
function rightJsonType(field: DescField, value: JsonValue): boolean {
  if (field.fieldKind === "list") return Array.isArray(value);
  if (field.fieldKind === "map") return isObject(value);
  if (field.fieldKind === "message") return wellKnown(field.message) || isObject(value);
  if (field.fieldKind === "enum") return false;
  if (field.scalar === ScalarType.STRING || field.scalar === ScalarType.BYTES) return typeof value === "string";
  if (field.scalar === ScalarType.BOOL) return typeof value === "boolean";
  return typeof value === "number" || (typeof value === "string" && NUMBER_TEXT.test(value));
}

/** Past this, fromJson's reason loses the value it quotes: cut, a number could slip past the redactor. */
const MAX_REASON_CHARS = 120;

/** fromJson's reason ("expected number (uint32): -1 out of range"), bounded and redacted. */
function decodeReason(error: unknown): string {
  const reason = errorText(error).replace(/^cannot decode .*? from JSON: /, "");
  if (reason.length <= MAX_REASON_CHARS) return redactText(reason);
  const kept = reason.replace(/,? got [\s\S]*$|: [\s\S]*$/, "");
  return kept.length <= MAX_REASON_CHARS ? kept : "does not decode";
}

function refused(input: DescMessage, problem: string, fieldViolations: readonly FieldViolation[] = []): ToolError {
  return new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `the request is not a ${input.name}: ${problem}`, {
    fieldViolations,
  });
}

/**
 * JSON.parse's reason without the excerpt of the input V8 quotes (`Unexpected token 'x', "{"phone":
 * 139"... is not valid JSON`): the excerpt can cut a number where no redactor recognises it.
 */
export function jsonParseReason(error: unknown): string {
  return errorText(error).replace(/, (?:\.\.\.)?"[\s\S]*$/, "");
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Past these, a request is refused for them alone (a JSON body's keys, protovalidate's findings): the answer stays small however many there are. */
export const MAX_VIOLATIONS = 10;
/** An unknown key longer than this is not echoed (it is the caller's text, and may be anything). */
const MAX_ECHOED_KEY_CHARS = 64;
/**
 * JSON nested deeper than this is refused before it is decoded: no contract nests so deep, and
 * protobuf-es encodes a message recursively, which a few thousand levels (a few KB) overflow.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests deeper than `max` levels (stops looking once it does). */
function deeperThan(value: unknown, max: number): boolean {
  if (value === null || typeof value !== "object") return false;
  if (max === 0) return true;
  return Object.values(value).some((child) => deeperThan(child, max - 1));
}

function kindOf(value: unknown): string {
  if (value === null) return "null";
  return Array.isArray(value) ? "a list" : `a ${typeof value}`;
}

/** The keys of a JSON object for `message` that do not decode alone (at most `max`), named below `path`. */
function violationsOf(
  message: DescMessage,
  entries: [string, JsonValue][],
  path: string,
  max: number,
): FieldViolation[] {
  const violations: FieldViolation[] = [];
  for (const [key, value] of entries) {
    if (violations.length === max) break;
    // protobuf JSON accepts a field's JSON name and its proto name.
    const field = message.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field) {
      violations.push(
        key.length <= MAX_ECHOED_KEY_CHARS
          ? { field: `${path}${key}`, description: `is not a field of ${message.name}` }
          : {
              field: path.slice(0, -1),
              description: `${path ? "has " : ""}a key of ${key.length} characters ${path ? "that " : ""}is not a field of ${message.name}`,
            },
      );
      continue;
    }
    try {
      fromJson(message, { [key]: value });
    } catch (error) {
      violations.push(violationOf(field, value, `${path}${field.name}`, error));
    }
  }
  return violations;
}

/** Why `value` does not decode as `field`: its type, else the first inner field at fault, else fromJson's reason. */
function violationOf(field: DescField, value: JsonValue, path: string, error: unknown): FieldViolation {
  if (!rightJsonType(field, value)) return { field: path, description: expected(field) };
  if (field.fieldKind === "message" && !wellKnown(field.message) && isObject(value)) {
    const inner = violationsOf(field.message, Object.entries(value as Record<string, JsonValue>), `${path}.`, 1)[0];
    if (inner) return inner;
  }
  return { field: path, description: `is invalid: ${decodeReason(error)}` };
}

/** Throws the ToolError that names what is wrong with `text` as a JSON `input`; returns nothing when it decodes. */
export function checkJsonBody(input: DescMessage, text: string): void {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw refused(input, `the body is not valid JSON (${jsonParseReason(error)})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw refused(input, `the body must be a JSON object, not ${kindOf(json)}`);
  }
  if (deeperThan(json, MAX_JSON_DEPTH)) throw refused(input, `the body nests deeper than ${MAX_JSON_DEPTH} levels`);
  const entries = Object.entries(json as Record<string, JsonValue>);
  const violations = violationsOf(input, entries, "", MAX_VIOLATIONS);
  if (violations.length > 0) {
    const problems = violations.map((v) => (v.field ? `${v.field} ${v.description}` : v.description));
    if (violations.length === MAX_VIOLATIONS && entries.length > MAX_VIOLATIONS)
      problems.push(`(only the first ${MAX_VIOLATIONS} problems of the body's ${entries.length} keys are named)`);
    throw refused(input, problems.join("; "), violations);
  }
  try {
    fromJson(input, json as JsonValue);
  } catch (error) {
    // Fields that decode alone but not together (two members of one oneof) have no single culprit.
    throw refused(input, errorText(error).replace(/^cannot decode .*? from JSON: /, ""));
  }
}
