// The contracts as one FileDescriptorSet (every contract file and all it imports), built from the
// descriptors the generated code embeds, so it needs no protoc: the images carry it (the release
// gate runs `buf breaking` of a new image's contracts against the live one's), and buf reads it
// as an image.
import { create, type DescFile, toBinary } from "@bufbuild/protobuf";
import { type FileDescriptorProto, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { contractFiles } from "./index.js";

/** Where the images keep the set (deploy/docker/Dockerfile), and the label naming that path. */
export const IMAGE_DESCRIPTOR_SET_PATH = "/app/contracts.binpb";
export const IMAGE_DESCRIPTOR_SET_LABEL = "io.loopguard.contracts";

export function contractDescriptorSet(files: readonly DescFile[] = contractFiles): Uint8Array {
  const seen = new Set<string>();
  const ordered: FileDescriptorProto[] = [];
  // Dependencies first, as protoc writes them with --include_imports.
  const visit = (file: DescFile): void => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    file.dependencies.forEach(visit);
    ordered.push(file.proto);
  };
  files.forEach(visit);
  return toBinary(FileDescriptorSetSchema, create(FileDescriptorSetSchema, { file: ordered }));
}
