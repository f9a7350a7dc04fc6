// Builds the contract image and the generated TypeScript, offline.
//
//   node scripts/gen.mjs            regenerate src/gen from the .proto sources
//   node scripts/gen.mjs --check    fail if regenerating would change src/gen
//   node scripts/gen.mjs --lint     buf lint the contracts
//   node scripts/gen.mjs --image F  write the compiled image (FileDescriptorSet) to F
//   node scripts/gen.mjs --breaking-against DIR
//                                   buf breaking against the proto/ folder of another checkout
//
// buf.validate cannot come from the Buf Schema Registry here, so its descriptors are taken from
// the ones @bufbuild/protovalidate embeds, written as a FileDescriptorSet and handed to protoc.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";

const protoDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const bin = (name) => join(protoDir, "node_modules", ".bin", name);
const googleProtos = dirname(dirname(require.resolve("google-proto-files/package.json")));
const rpcProtos = ["google/rpc/status.proto", "google/rpc/error_details.proto", "google/rpc/code.proto"];
// The standard health contract, as served by grpc-health-check, under its canonical file name, so
// server reflection can describe grpc.health.v1.Health (the proto-loader descriptor it carries
// has a map entry protoc-based tools reject).
const healthProto = "grpc/health/v1/health.proto";
const healthSource = join(
  dirname(require.resolve("grpc-health-check/package.json")),
  "proto",
  "health",
  "v1",
  "health.proto",
);

function listProtos(root, sub = "loopguard") {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith(".proto")) out.push(relative(root, path));
    }
  };
  walk(join(root, sub));
  return out;
}

function validateDescriptorSet() {
  const seen = new Set();
  const files = [];
  const visit = (file) => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    file.dependencies.forEach(visit);
    files.push(file.proto);
  };
  visit(file_buf_validate_validate);
  return toBinary(FileDescriptorSetSchema, create(FileDescriptorSetSchema, { file: files }));
}

/** Compiles the .proto files under `root` into one image with all imports and source info. */
function buildImage(root, workDir) {
  const validateSet = join(workDir, "validate.binpb");
  writeFileSync(validateSet, validateDescriptorSet());
  const healthRoot = join(workDir, "health");
  mkdirSync(join(healthRoot, dirname(healthProto)), { recursive: true });
  cpSync(healthSource, join(healthRoot, healthProto));
  const image = join(workDir, "image.binpb");
  execFileSync(
    "protoc",
    [
      `--descriptor_set_in=${validateSet}`,
      `-I${root}`,
      `-I${join(googleProtos, "google-proto-files")}`,
      `-I${healthRoot}`,
      "--include_imports",
      "--include_source_info",
      `-o${image}`,
      ...listProtos(root),
      ...rpcProtos,
      healthProto,
    ],
    { stdio: "inherit" },
  );
  return image;
}

function generate(image, outDir, workDir) {
  const template = join(workDir, "buf.gen.yaml");
  writeFileSync(
    template,
    [
      "version: v2",
      "plugins:",
      `  - local: ${bin("protoc-gen-es")}`,
      `    out: ${outDir}`,
      "    opt:",
      "      - target=ts",
      "      - import_extension=js",
      "      - rewrite_imports=./buf/validate/**/*_pb.js:@bufbuild/protovalidate/gen",
      "",
    ].join("\n"),
  );
  execFileSync(
    bin("buf"),
    ["generate", image, "--template", template, "--path", "loopguard", "--path", "google/rpc", "--path", "grpc/health"],
    {
      stdio: "inherit",
      cwd: workDir,
    },
  );
}

const args = process.argv.slice(2);
const workDir = mkdtempSync(join(tmpdir(), "loopguard-gen-"));
try {
  const image = buildImage(protoDir, workDir);
  if (args[0] === "--lint") {
    execFileSync(bin("buf"), ["lint", image, "--config", join(protoDir, "buf.yaml"), "--path", "loopguard"], {
      stdio: "inherit",
    });
    console.log("buf lint: clean");
  } else if (args[0] === "--image") {
    cpSync(image, resolve(args[1]));
  } else if (args[0] === "--breaking-against") {
    const againstDir = mkdtempSync(join(workDir, "against-"));
    const against = buildImage(resolve(args[1]), againstDir);
    execFileSync(
      bin("buf"),
      ["breaking", image, "--against", against, "--config", join(protoDir, "buf.yaml"), "--path", "loopguard"],
      { stdio: "inherit" },
    );
    console.log("buf breaking: no wire-incompatible change");
  } else if (args[0] === "--check") {
    const fresh = join(workDir, "gen");
    generate(image, fresh, workDir);
    try {
      execFileSync("diff", ["-r", fresh, join(protoDir, "src", "gen")], { stdio: "inherit" });
    } catch {
      console.error("generated code is stale: run `pnpm gen` and commit src/gen");
      process.exit(1);
    }
    console.log("generated code is up to date");
  } else {
    const out = join(protoDir, "src", "gen");
    rmSync(out, { recursive: true, force: true });
    generate(image, out, workDir);
    console.log(`generated ${relative(process.cwd(), out)}`);
  }
} finally {
  rmSync(workDir, { recursive: true, force: true });
}
