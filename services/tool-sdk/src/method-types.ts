// A generated service descriptor's methods as types, keyed by local name: what a typed client takes
// and gives per method, and what a server's handler table is keyed by.
import type { DescMethod, DescService, MessageInitShape, MessageShape } from "@bufbuild/protobuf";

export type MethodsOf<S extends DescService> = S extends { method: infer R } ? R : never;

export type MethodKey<S extends DescService> = keyof MethodsOf<S> & string;

export type InputOf<S extends DescService, K extends keyof MethodsOf<S>> = MethodsOf<S>[K] extends DescMethod
  ? MessageInitShape<MethodsOf<S>[K]["input"]>
  : never;

export type OutputOf<S extends DescService, K extends keyof MethodsOf<S>> = MethodsOf<S>[K] extends DescMethod
  ? MessageShape<MethodsOf<S>[K]["output"]>
  : never;
