// The protobuf-es ↔ grpc-js bridge: protobuf-es v2 emits no grpc-js service definitions, so a
// GenService is mapped to a grpc-js ServiceDefinition here, with toBinary/fromBinary as the
// (de)serializers. Tools are unary; the orchestrator also streams (server streaming).
import {
  type DescMessage,
  type DescMethod,
  type DescService,
  fromBinary,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import { methodPath } from "./contract.js";

export type UnaryMethodDefinition = MethodDefinition<MessageShape<DescMessage>, MessageShape<DescMessage>>;

export function methodDefinition(method: DescMethod): UnaryMethodDefinition {
  if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") {
    throw new Error(`${method.parent.typeName}.${method.name}: only unary and server-streaming methods are supported`);
  }
  const { input, output } = method;
  return {
    path: methodPath(method),
    requestStream: false,
    responseStream: method.methodKind === "server_streaming",
    requestSerialize: (message) => Buffer.from(toBinary(input, message)),
    requestDeserialize: (bytes) => fromBinary(input, bytes),
    responseSerialize: (message) => Buffer.from(toBinary(output, message)),
    responseDeserialize: (bytes) => fromBinary(output, bytes),
    originalName: method.localName,
  };
}

/** grpc-js ServiceDefinition keyed by the methods' protobuf-es local names (e.g. "getOrder"). */
export function serviceDefinition(service: DescService): ServiceDefinition {
  return Object.fromEntries(service.methods.map((m) => [m.localName, methodDefinition(m)]));
}
