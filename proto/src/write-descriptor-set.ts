// `node write-descriptor-set.js FILE`: writes the contracts' FileDescriptorSet (descriptor-set.ts)
// to FILE; the image build runs it so every image carries the contracts it serves.
import { writeFileSync } from "node:fs";
import { contractDescriptorSet } from "./descriptor-set.js";

const [file] = process.argv.slice(2);
if (!file) {
  process.stderr.write("usage: write-descriptor-set.js FILE\n");
  process.exit(2);
}
writeFileSync(file, contractDescriptorSet());
