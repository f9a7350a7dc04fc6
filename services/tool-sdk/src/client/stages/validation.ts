// The contract checked on the calling side: a request that breaks it is never sent, and an answer
// that breaks it is not handed to the caller (a failed attempt, like any other).
import type { DescMethod, MessageShape } from "@bufbuild/protobuf";
import { status } from "@grpc/grpc-js";
import { violationsOf } from "../../validation.js";
import { CallError } from "../call-error.js";
import type { ClientInterceptor } from "../chain.js";

export const requestValidationStage: ClientInterceptor = (next) => (call) => {
  const { method } = call.target;
  const violations = violationsOf(method.input, call.request as MessageShape<DescMethod["input"]>);
  if (violations.length === 0) return next(call);
  return Promise.reject(
    new CallError({
      code: status.INVALID_ARGUMENT,
      reason: "CLIENT_VALIDATION_FAILED",
      message: `invalid ${method.input.name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
      fieldViolations: violations,
      attempts: 0,
      tool: call.target.tool,
      method: method.name,
    }),
  );
};

export const responseValidationStage: ClientInterceptor = (next) => (call) =>
  next(call).then((response) => {
    const { tool, method } = call.target;
    const violations = violationsOf(method.output, response as MessageShape<DescMethod["output"]>);
    if (violations.length === 0) return response;
    throw new CallError({
      code: status.INTERNAL,
      reason: "CONTRACT_VIOLATION",
      message: `${tool} answered ${method.name} with a response that breaks its contract: ${violations.map((v) => v.field).join(", ")}`,
      attempts: call.attempt.number,
      tool,
      method: method.name,
    });
  });
