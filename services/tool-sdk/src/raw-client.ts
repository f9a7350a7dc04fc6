// A typed grpc-js client for a contract with no policy of its own: one attempt, the deadline
// and metadata the caller gives. toolClient adds validation, retries, breaker and fallbacks on
// top; tests use this one to see exactly what the server does.
import {
  create,
  type DescMethod,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  type CallOptions,
  type ClientReadableStream,
  Client,
  type ChannelOptions,
  credentials,
  Metadata,
  type ServiceError,
} from "@grpc/grpc-js";
import { methodDefinition } from "./bridge.js";
import { type CallFailure, decodeStatusDetails } from "./errors.js";

export class CallError extends Error implements CallFailure {
  override readonly name = "CallError";
  readonly code: CallFailure["code"];
  readonly reason: string | undefined;
  readonly domain: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: CallFailure["fieldViolations"];
  readonly metadata: CallFailure["metadata"];

  constructor(failure: CallFailure) {
    super(failure.message);
    this.code = failure.code;
    this.reason = failure.reason;
    this.domain = failure.domain;
    this.retryAfterMs = failure.retryAfterMs;
    this.fieldViolations = failure.fieldViolations;
    this.metadata = failure.metadata;
  }
}

export interface RawCallOptions {
  /** Absolute deadline, or milliseconds from now. */
  readonly deadline?: Date | number;
  readonly metadata?: Metadata;
  /** Bearer token for this call instead of the client's (e.g. one bound to this request). */
  readonly token?: string;
}

type MethodsOf<S extends DescService> = S extends { method: infer R } ? R : never;

export type RawClient<S extends DescService> = {
  [K in keyof MethodsOf<S>]: MethodsOf<S>[K] extends DescMethod & { methodKind: "server_streaming" }
    ? (
        request: MessageInitShape<MethodsOf<S>[K]["input"]>,
        options?: RawCallOptions,
      ) => AsyncIterable<MessageShape<MethodsOf<S>[K]["output"]>>
    : MethodsOf<S>[K] extends DescMethod
      ? (
          request: MessageInitShape<MethodsOf<S>[K]["input"]>,
          options?: RawCallOptions,
        ) => Promise<MessageShape<MethodsOf<S>[K]["output"]>>
      : never;
} & { readonly grpc: Client; close(): void };

export interface RawClientOptions {
  /** Bearer token sent as "authorization" on every call. */
  readonly token?: string;
  readonly channelOptions?: ChannelOptions;
}

export function createRawClient<S extends DescService>(
  service: S,
  target: string,
  options: RawClientOptions = {},
): RawClient<S> {
  const client = new Client(target, credentials.createInsecure(), options.channelOptions ?? {});
  const out: Record<string, unknown> = { grpc: client, close: () => client.close() };
  const metadataFor = (callOptions: RawCallOptions) => {
    const metadata = callOptions.metadata?.clone() ?? new Metadata();
    const token = callOptions.token ?? options.token;
    if (token) metadata.set("authorization", `Bearer ${token}`);
    return metadata;
  };
  for (const method of service.methods) {
    const def = methodDefinition(method as DescMethod);
    if (method.methodKind === "server_streaming") {
      out[method.localName] = (request: MessageInitShape<DescMethod["input"]>, callOptions: RawCallOptions = {}) =>
        streamToIterable(
          client.makeServerStreamRequest(
            def.path,
            def.requestSerialize,
            def.responseDeserialize,
            create((method as DescMethod).input, request),
            metadataFor(callOptions),
            {
              ...(callOptions.deadline !== undefined
                ? {
                    deadline:
                      typeof callOptions.deadline === "number"
                        ? new Date(Date.now() + callOptions.deadline)
                        : callOptions.deadline,
                  }
                : {}),
            },
          ),
        );
      continue;
    }
    out[method.localName] = (request: MessageInitShape<DescMethod["input"]>, callOptions: RawCallOptions = {}) =>
      new Promise((resolve, reject) => {
        const metadata = metadataFor(callOptions);
        const grpcOptions: CallOptions = {};
        if (callOptions.deadline !== undefined) {
          grpcOptions.deadline =
            typeof callOptions.deadline === "number"
              ? new Date(Date.now() + callOptions.deadline)
              : callOptions.deadline;
        }
        client.makeUnaryRequest(
          def.path,
          def.requestSerialize,
          def.responseDeserialize,
          create((method as DescMethod).input, request),
          metadata,
          grpcOptions,
          (error: ServiceError | null, response?: unknown) => {
            if (error) reject(new CallError(decodeStatusDetails(error)));
            else resolve(response);
          },
        );
      });
  }
  return out as RawClient<S>;
}

/** A grpc-js response stream as an async iterable that rejects with CallError. */
async function* streamToIterable(stream: ClientReadableStream<unknown>): AsyncGenerator<unknown> {
  try {
    for await (const message of stream) yield message;
  } catch (error) {
    throw new CallError(decodeStatusDetails(error as ServiceError));
  } finally {
    stream.cancel();
  }
}
