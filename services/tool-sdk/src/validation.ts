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

/**
 * Compiles the validation plans (CEL programs included) of a method's messages ahead of the
 * first call, so the first request does not pay for it.
 */
export function warmValidation(method: DescMethod): void {
  violationsOf(method.input, create(method.input));
  violationsOf(method.output, create(method.output));
}
