// The client's bearer token for a call that brings none of its own (a session's least-privilege token).
import type { ClientInterceptor } from "../chain.js";

export type TokenSource = string | (() => string | Promise<string>);

export function credentialsStage(token: TokenSource): ClientInterceptor {
  if (typeof token === "string") {
    return (next) => (call) => {
      call.token ??= token;
      return next(call);
    };
  }
  return (next) => async (call) => {
    call.token ??= await token();
    return next(call);
  };
}
