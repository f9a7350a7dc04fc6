// A Connect request's JSON body checked against the method's input message before Connect decodes
// it, so every refusal is INVALID_ARGUMENT REQUEST_INVALID naming what is wrong: not JSON (the
// parser's reason without its excerpt), not an object, a field the message lacks, a value of the
// wrong type (the field named in a BadRequest violation).
import { type DescField, type DescMessage, fromJson, type JsonValue, ScalarType } from "@bufbuild/protobuf";
import { type FieldViolation, status, ToolError } from "../errors.js";

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

/** Past these, a body is refused for them alone: the answer stays small however many keys the body has. */
const MAX_VIOLATIONS = 10;
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
  const violations: FieldViolation[] = [];
  const entries = Object.entries(json as Record<string, JsonValue>);
  for (const [key, value] of entries) {
    if (violations.length === MAX_VIOLATIONS) break;
    // protobuf JSON accepts a field's JSON name and its proto name.
    const field = input.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field) {
      violations.push(
        key.length <= MAX_ECHOED_KEY_CHARS
          ? { field: key, description: `is not a field of ${input.name}` }
          : { field: "", description: `a key of ${key.length} characters is not a field of ${input.name}` },
      );
      continue;
    }
    try {
      fromJson(input, { [key]: value });
    } catch {
      violations.push({ field: field.name, description: expected(field) });
    }
  }
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
