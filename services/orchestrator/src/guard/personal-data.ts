// Personal data stays with the host (DESIGN, principle 11). The model sees the task's personal
// data only as placeholders naming where it stands in the task ({{task.id_card}}); on the way to a
// tool, a request field the contract marks FIELD_ROLE_PERSONAL_DATA gets the value of the task
// field it names (task_field), and any other value is refused; an answer is re-identified only by
// a caller that holds the task. What is personal data is tool-sdk's detection (pii.ts), the same
// the redactor uses; which fields take it is the contracts' say, never a name known here.
import type { DescMethod } from "@bufbuild/protobuf";
import {
  canonicalPersonalData,
  FieldRole,
  type Folded,
  fieldPolicy,
  fold,
  foldedEnd,
  mayBeDisguised,
  personalDataSpans,
  REDACTED,
  redactNumber,
  replacePersonalData,
  replaceSecrets,
  TaskBound,
} from "@loopguard/tool-sdk";
import { isCredentialUnder, redact } from "./redact.js";
import type { JsonObject, JsonValue } from "../store/session-store.js";

/** A request field that takes personal data, and the task field whose value it must be. */
export interface PersonalField {
  /** JSON name, as the model writes it (protobuf JSON also accepts the proto name). */
  readonly jsonName: string;
  readonly name: string;
  /** Path of the task field whose value the argument must be, e.g. "id_card". */
  readonly taskField: string;
}

/** What the policy is shown of a session's goal and task. */
export interface ModelView {
  readonly goal: string;
  readonly task: JsonObject;
}

/** How a model may name a task value it is not shown: `{{task.id_card}}`, `{{task.customer.phone}}`. */
const PLACEHOLDER = /\{\{task\.([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\}\}/g;
const PATH_SEGMENT = /^[A-Za-z0-9_-]+$/;

export function placeholderOf(path: string): string {
  return `{{task.${path}}}`;
}

/** The request fields of `method` that take personal data; throws when one does not name the task field bounding it. */
export function personalFieldsOf(method: DescMethod): PersonalField[] {
  return method.input.fields.flatMap((f) => {
    const p = fieldPolicy(f);
    if (p.role !== FieldRole.PERSONAL_DATA) return [];
    if (!p.taskField || p.taskBound !== TaskBound.EQUAL || f.fieldKind !== "scalar") {
      throw new Error(
        `personal-data field ${method.input.typeName}.${f.name} must be a scalar with (field) = {task_field: "...", task_bound: TASK_BOUND_EQUAL}`,
      );
    }
    return [{ jsonName: f.jsonName, name: f.name, taskField: p.taskField }];
  });
}

/** The task's value at a dotted path ("customer.phone", "contacts.0"), if any. */
export function taskValueAt(task: JsonObject, path: string): JsonValue | undefined {
  let value: JsonValue | undefined = task;
  for (const key of path.split(".")) {
    if (value === null || typeof value !== "object") return undefined;
    if (!Object.hasOwn(value, key)) return undefined;
    value = Array.isArray(value) ? value[Number(key)] : value[key];
  }
  return value;
}

/** The canonical form of a task or argument value that is one piece of personal data. */
export function canonicalOf(value: JsonValue | undefined): string | undefined {
  if (typeof value === "string") return canonicalPersonalData(value);
  return typeof value === "number" && redactNumber(value) === REDACTED
    ? canonicalPersonalData(String(value))
    : undefined;
}

/** A path a placeholder may name: segments of word characters, none holding personal data itself. */
const nameable = (path: readonly string[]) =>
  path.every((segment) => PATH_SEGMENT.test(segment) && personalDataSpans(segment).length === 0);

/** Views by task object: a session's task never changes, and each step shows the policy the same view. */
const views = new WeakMap<JsonObject, { readonly goal: string; readonly view: ModelView }>();

/**
 * The session as the policy sees it: every task value that is personal data becomes the
 * placeholder of its path; in the goal and in the task's other text, personal data equal to such
 * a value becomes its placeholder and any other is redacted, and so does the digits of such a value
 * written in any other way (ownValues). Keys holding personal data are redacted too (the task's own
 * numbers in them, however written, become their placeholders), and so are
 * credentials: values under their keys and tokens and keys in any text.
 */
export function modelView(goal: string, task: JsonObject): ModelView {
  const cached = views.get(task);
  if (cached?.goal === goal) return cached.view;
  const placeholders = new Map<string, string>();
  collect(task, [], placeholders);
  const own = ownValues(placeholders);
  const inText = (text: string) =>
    own(
      replacePersonalData(
        replaceSecrets(text, REDACTED),
        (found) => placeholders.get(canonicalPersonalData(found) ?? "") ?? REDACTED,
      ),
    );
  const view: ModelView = { goal: inText(goal), task: viewOf(task, [], inText, own) as JsonObject };
  views.set(task, { goal, view });
  return view;
}

/** What may stand between two digits of the task's own number: up to three characters that are neither letters nor digits. */
const APART = "[^\\p{L}\\p{N}]{0,3}";

/** A digit as the pattern looks for it, in the folded text (tool-sdk's fold): ASCII, and an X either way. */
const digitClass = (c: string) => (c === "X" ? "[Xx]" : c);

/**
 * The second line behind tool-sdk's detection, which knows the shapes a number may take; this knows
 * the task's own numbers and finds their digits in order however they are apart: by up to three
 * characters that are neither letters nor digits ("1-3-8-0-0-1-3-8-0-0-0", "138*0013*8000",
 * "138 ‧ 0013 ‧ 8000"). It looks in the text as tool-sdk folds it, so full-width digits, invisible
 * characters and JSON escapes ("\u0031\u0033…") hide no digit. Each becomes what `placeholders`
 * maps it to: its placeholder, or REDACTED in what the API serves (personal-data-served.ts). A
 * mobile is looked for by its 11 national digits, with its country code before them if it is
 * written ("+86", "0086" or "86"): the "6" of "8613800138000z" would otherwise stand right before
 * the first digit, where no digit may, and hide the number.
 */
export function ownValues(placeholders: ReadonlyMap<string, string>): (text: string) => string {
  if (placeholders.size === 0) return (text) => text;
  const shown: string[] = [];
  const alternatives: string[] = [];
  for (const [canonical, placeholder] of placeholders) {
    const mobile = canonical.startsWith("+86");
    const digits = [...(mobile ? canonical.slice(3) : canonical)].map(digitClass).join(APART);
    alternatives.push(mobile ? `((?:(?:\\+|00)?86${APART})?${digits})` : `(${digits})`);
    shown.push(placeholder);
  }
  const pattern = new RegExp(`(?<!\\p{N})(?:${alternatives.join("|")})(?!\\p{N})`, "gu");
  return (text) => {
    const { text: folded, at }: Folded = mayBeDisguised(text) ? fold(text) : { text };
    let out = "";
    let copied = 0;
    pattern.lastIndex = 0;
    for (let m = pattern.exec(folded); m; m = pattern.exec(folded)) {
      const start = at ? at[m.index]! : m.index;
      out += text.slice(copied, start) + shown[m.slice(1).findIndex((g) => g !== undefined)]!;
      copied = at ? foldedEnd(text, at[pattern.lastIndex - 1]!) : pattern.lastIndex;
    }
    return copied === 0 ? text : out + text.slice(copied);
  };
}

type Mask = (text: string) => string;

function collect(value: JsonValue, path: string[], placeholders: Map<string, string>): void {
  if (value !== null && typeof value === "object") {
    for (const [key, child] of Object.entries(value)) collect(child, [...path, key], placeholders);
    return;
  }
  const canonical = canonicalOf(value);
  if (canonical !== undefined && !placeholders.has(canonical) && nameable(path))
    placeholders.set(canonical, placeholderOf(path.join(".")));
}

/** `own` masks the task's own numbers however written: in a key ("138*0013*8000": …) too. */
function viewOf(value: JsonValue, path: string[], inText: Mask, own: Mask): JsonValue {
  if (Array.isArray(value)) return value.map((child, i) => viewOf(child, [...path, String(i)], inText, own));
  if (value !== null && typeof value === "object") {
    const out: JsonObject = {};
    for (const [key, child] of Object.entries(value)) {
      const shown = isCredentialUnder(key, child) ? REDACTED : viewOf(child, [...path, key], inText, own);
      Object.defineProperty(out, own(replacePersonalData(key, () => REDACTED)), {
        value: shown,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  if (canonicalOf(value) !== undefined) return nameable(path) ? placeholderOf(path.join(".")) : REDACTED;
  return typeof value === "string" ? inText(value) : value;
}

/** What becomes of the model's arguments on the way to the tool: the task's values in its personal-data fields, or why not. */
export type WithTaskValues =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly message: string; readonly suggestedAction: string };

/**
 * Puts the task's values into the personal-data fields of the model's arguments (`value`, parsed
 * JSON, before the contract's rules run: a placeholder would fail them). A field holding the
 * placeholder of its task field, or the task's value itself however written, gets the task's
 * value; any other value — another person's number, another field's placeholder, a value the
 * task does not hold — is refused. An absent or empty field is left to the contract's rules.
 */
export function withTaskValues(
  toolName: string,
  fields: readonly PersonalField[],
  value: unknown,
  task: JsonObject,
): WithTaskValues {
  if (fields.length === 0 || value === null || typeof value !== "object" || Array.isArray(value))
    return { ok: true, value };
  const args = { ...(value as JsonObject) };
  for (const field of fields) {
    for (const key of field.jsonName === field.name ? [field.name] : [field.jsonName, field.name]) {
      const given = args[key];
      if (given === undefined || given === null || given === "") continue;
      const expected = taskValueAt(task, field.taskField);
      const held = typeof expected === "string" || typeof expected === "number" ? canonicalOf(expected) : undefined;
      const named = typeof given === "string" && given === placeholderOf(field.taskField);
      if (held === undefined || (!named && canonicalOf(given) !== held))
        return refusal(toolName, field, held !== undefined);
      args[key] = String(expected);
    }
  }
  return { ok: true, value: args };
}

function refusal(toolName: string, field: PersonalField, taskHolds: boolean): WithTaskValues {
  const placeholder = placeholderOf(field.taskField);
  const bound = taskHolds
    ? `the task's ${field.taskField} (${placeholder})`
    : `the task's ${field.taskField}, and this task names none`;
  return {
    ok: false,
    message: `${toolName}.${field.jsonName} must be ${bound}; the host reads personal data only for the people the task names`,
    suggestedAction: taskHolds
      ? `pass ${placeholder} as ${field.jsonName}, exactly as the task shows it`
      : `do not call ${toolName}: the task names no ${field.taskField}`,
  };
}

/**
 * The arguments as the session's history keeps them: personal-data fields as the placeholder of
 * their task field (the model's own words), everything else redacted.
 */
export function shownArguments(fields: readonly PersonalField[], args: JsonObject): JsonObject {
  const shown = redact(args);
  const named = fields.filter((f) => args[f.jsonName] !== undefined);
  return named.length === 0
    ? shown
    : { ...shown, ...Object.fromEntries(named.map((f) => [f.jsonName, placeholderOf(f.taskField)])) };
}

/** `text` with every placeholder naming a value of `task` replaced by that value: only for a caller that holds the task. */
export function reidentify(text: string, task: JsonObject): string {
  return text.replace(PLACEHOLDER, (whole, path: string) => {
    const value = taskValueAt(task, path);
    return typeof value === "string" || typeof value === "number" ? String(value) : whole;
  });
}
