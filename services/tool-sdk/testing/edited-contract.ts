// A contract as a team might write or change it, for tests: a shipped contract file's descriptor,
// edited, then resolved against the files it imports.
import { clone, createFileRegistry, type DescFile, type DescService } from "@bufbuild/protobuf";
import { type FileDescriptorProto, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";

/** Every file a contract file imports, by its import path ("a/b.proto"; DescFile names drop ".proto"). */
function dependencies(file: DescFile, out = new Map<string, DescFile>()): Map<string, DescFile> {
  for (const d of file.dependencies) {
    out.set(`${d.name}.proto`, d);
    dependencies(d, out);
  }
  return out;
}

/** The service `serviceName` of `file` after `edit` changed the file's descriptor. */
export function editedContract(
  file: DescFile,
  serviceName: string,
  edit: (proto: FileDescriptorProto) => void,
): DescService {
  const proto = clone(FileDescriptorProtoSchema, file.proto);
  edit(proto);
  const deps = dependencies(file);
  return createFileRegistry(proto, (name) => deps.get(name)).getService(serviceName)!;
}
