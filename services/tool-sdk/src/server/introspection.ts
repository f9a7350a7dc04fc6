// What a server says about itself over gRPC: grpc.health.v1 (overall and for the contract's service)
// and server reflection of the contract, the admin service and health.
import { type DescService, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type {
  handleServerStreamingCall,
  Server,
  ServerWritableStream,
  ServiceDefinition,
  UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { Health } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { HealthImplementation } from "grpc-health-check";

const HEALTH_OVERALL = "";

/** FileDescriptorProtos of a file and everything it imports, for server reflection. */
function reflectionFiles(services: readonly DescService[]): Uint8Array[] {
  const seen = new Set<string>();
  const out: Uint8Array[] = [];
  const visit = (file: DescService["file"]) => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    file.dependencies.forEach(visit);
    out.push(toBinary(FileDescriptorProtoSchema, file.proto));
  };
  for (const s of services) visit(s.file);
  return out;
}

/** Adds health (SERVING) and reflection to the server; returns the call that turns health NOT_SERVING. */
export function serveIntrospection(server: Server, service: DescService): () => void {
  const served = { [HEALTH_OVERALL]: "SERVING", [service.typeName]: "SERVING" } as const;
  const health = new HealthImplementation(served);
  const known = new Set(Object.keys(served));
  health.addToServer({
    addService: (definition: ServiceDefinition, implementation: UntypedServiceImplementation) =>
      server.addService(definition, {
        ...implementation,
        // grpc-health-check keeps a watcher set under every name a Watch asks for, after the call
        // has ended too: anyone (health needs no token) could fill the memory with new names. A
        // name this server does not serve is answered SERVICE_UNKNOWN, as the library would, but
        // without a set (its status never changes; the stream stays open until the caller ends it).
        watch: (call: ServerWritableStream<{ service: string }, unknown>) =>
          known.has(call.request.service)
            ? (implementation.watch as handleServerStreamingCall<unknown, unknown>)(call)
            : call.write({ status: "SERVICE_UNKNOWN" }),
      }),
  });
  // Health is described too, so `grpcurl`/`buf curl` can call grpc.health.v1.Health/Check by name.
  new ReflectionService({
    loopguard: { fileDescriptorProtos: reflectionFiles([service, ToolAdminService, Health]) },
  } as never).addToServer(server);
  return () => {
    health.setStatus(HEALTH_OVERALL, "NOT_SERVING");
    health.setStatus(service.typeName, "NOT_SERVING");
  };
}
