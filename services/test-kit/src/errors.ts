// A call that must fail, as the error it failed with, so that a test asserts on the error's fields.

/** A class of errors, e.g. CallError or ToolError. */
export type ErrorClass<E> = abstract new (...args: never[]) => E;

/** What `call` rejected with; a call that answers fails the test. */
export async function errorOf(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
  } catch (error) {
    return error;
  }
  throw new Error("expected the call to fail, but it answered");
}

/** The `type` error `call` was refused with; an answer, or an error of another type, fails the test. */
export async function refusal<E>(call: Promise<unknown>, type: ErrorClass<E>): Promise<E> {
  const error = await errorOf(call);
  if (error instanceof type) return error;
  throw new Error(`expected a ${type.name}, got ${String(error)}`, { cause: error });
}
