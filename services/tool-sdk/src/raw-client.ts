// A typed grpc-js client for a contract with no policy of its own: the empty chain, the transport
// alone (one attempt, the deadline and metadata the caller gives). toolClient composes its stages in
// front of the same transport; tests use this one to see exactly what the server does.
import { create, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type ChannelOptions,
  Client,
  type ClientReadableStream,
  credentials,
  type Metadata,
  type ServiceError,
} from "@grpc/grpc-js";
import { type CallTarget, callTarget, newCall } from "./client/chain.js";
import { metadataFor, statusError, transport } from "./client/stages/transport.js";
import type { InputOf, MethodsOf, OutputOf } from "./method-types.js";

export interface RawCallOptions {
  /** Absolute deadline, or milliseconds from now. */
  readonly deadline?: Date | number;
  readonly metadata?: Metadata;
  /** Bearer token for this call instead of the client's (e.g. one bound to this request). */
  readonly token?: string;
}

export type RawClient<S extends DescService> = {
  [K in keyof MethodsOf<S>]: MethodsOf<S>[K] extends DescMethod & { methodKind: "server_streaming" }
    ? (request: InputOf<S, K>, options?: RawCallOptions) => AsyncIterable<OutputOf<S, K>>
    : MethodsOf<S>[K] extends DescMethod
      ? (request: InputOf<S, K>, options?: RawCallOptions) => Promise<OutputOf<S, K>>
      : never;
} & { readonly grpc: Client; close(): void };

export interface RawClientOptions {
  /** Bearer token sent as "authorization" on every call. */
  readonly token?: string;
  readonly channelOptions?: ChannelOptions;
}

/** No contract policy here: errors name the service by its type name, and no reason counts as the tool's own. */
const NO_DOMAIN_REASONS: ReadonlySet<string> = new Set();

export function createRawClient<S extends DescService>(
  service: S,
  target: string,
  options: RawClientOptions = {},
): RawClient<S> {
  const client = new Client(target, credentials.createInsecure(), options.channelOptions ?? {});
  const send = transport(client);
  const out: Record<string, unknown> = { grpc: client, close: () => client.close() };
  for (const method of service.methods as DescMethod[]) {
    const callTargetOf = callTarget(service.typeName, method, NO_DOMAIN_REASONS);
    const callOf = (request: MessageInitShape<DescMethod["input"]>, callOptions: RawCallOptions) =>
      newCall({
        target: callTargetOf,
        request: create(method.input, request),
        metadata: callOptions.metadata,
        token: callOptions.token ?? options.token,
        deadline:
          typeof callOptions.deadline === "number"
            ? Date.now() + callOptions.deadline
            : callOptions.deadline?.getTime(),
      });
    out[method.localName] =
      method.methodKind === "server_streaming"
        ? (request: MessageInitShape<DescMethod["input"]>, callOptions: RawCallOptions = {}) => {
            const call = callOf(request, callOptions);
            const stream = client.makeServerStreamRequest(
              callTargetOf.path,
              (bytes: Buffer) => bytes,
              callTargetOf.deserialize,
              call.bytes,
              metadataFor(call),
              call.deadline === undefined ? {} : { deadline: new Date(call.deadline) },
            );
            return streamToIterable(stream, callTargetOf);
          }
        : (request: MessageInitShape<DescMethod["input"]>, callOptions: RawCallOptions = {}) =>
            send(callOf(request, callOptions));
  }
  return out as RawClient<S>;
}

/** A grpc-js response stream as an async iterable that rejects with CallError. */
async function* streamToIterable(stream: ClientReadableStream<unknown>, target: CallTarget): AsyncGenerator<unknown> {
  try {
    for await (const message of stream) yield message;
  } catch (error) {
    throw statusError(error as ServiceError, { target }, 1);
  } finally {
    stream.cancel();
  }
}
