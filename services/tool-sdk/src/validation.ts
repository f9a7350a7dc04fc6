// Contract validation with protovalidate: the same rules on both sides of every call.
import { create, type DescMessage, type DescMethod, type MessageShape } from "@bufbuild/protobuf";
import { pathToString } from "@bufbuild/protobuf/reflect";
import { createValidator } from "@bufbuild/protovalidate";
import type { FieldViolation } from "./errors.js";

const validator = createValidator();

/** Field violations of `message` against its contract; empty when it is valid. */
export function violationsOf<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): FieldViolation[] {
  const result = validator.validate(schema, message);
  if (result.kind === "valid") return [];
  if (result.kind === "error") {
    throw result.error;
  }
  return result.violations.map((v) => ({
    field: pathToString(v.field) || "(message)",
    description: v.message,
    reason: v.ruleId,
  }));
}

/** A broken rule the contract cannot express, found by a service's `validate` hook (see Validator). */
export interface RuleViolation extends FieldViolation {
  /**
   * The ErrorInfo reason, from the contract's closed set, of a refusal for this rule alone (risk's
   * INVALID_PHONE_FORMAT); unset, REQUEST_INVALID.
   */
  readonly errorReason?: string;
}

const REQUEST_INVALID = "REQUEST_INVALID";

/**
 * A request's violations, the contract's and the service's rules', in the order of the message's
 * fields, and the reason it is refused with: the one its rules name when they alone are broken and
 * all name it, else the general REQUEST_INVALID. A rule on a field the contract already refused is
 * left out: it would only say again, in other words, that the value is malformed.
 */
export function mergedViolations(
  schema: DescMessage,
  contract: readonly FieldViolation[],
  rules: readonly RuleViolation[],
): { violations: FieldViolation[]; reason: string } {
  const refused = new Set(contract.map((v) => v.field));
  const added = rules.filter((v) => !refused.has(v.field));
  const reasons = new Set([
    ...(contract.length > 0 ? [REQUEST_INVALID] : []),
    ...added.map((v) => v.errorReason ?? REQUEST_INVALID),
  ]);
  const [only] = reasons;
  const place = (v: FieldViolation) => {
    const at = schema.fields.findIndex((f) => f.name === v.field.split(/[.[]/, 1)[0]);
    return at < 0 ? schema.fields.length : at;
  };
  const violations = [...contract, ...added.map(({ field, description, reason }) => ({ field, description, reason }))];
  return {
    violations: violations.sort((a, b) => place(a) - place(b)),
    reason: reasons.size === 1 && only !== undefined ? only : REQUEST_INVALID,
  };
}

/**
 * Compiles the validation plans (CEL programs included) of a method's messages ahead of the
 * first call, so the first request does not pay for it.
 */
export function warmValidation(method: DescMethod): void {
  violationsOf(method.input, create(method.input));
  violationsOf(method.output, create(method.output));
}
