// `pnpm start`: the whole suite on one machine, every service its own supervised process on
// loopback, data under .data/ (LOOPGUARD_DATA_DIR), a token-signing secret made on first start.
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createLogger, ensureLocalSecret, localSecretPath } from "@loopguard/tool-sdk";
import { discoverServices } from "./services.js";
import { Supervisor } from "./supervisor.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const dataDir = resolve(process.env.LOOPGUARD_DATA_DIR || join(root, ".data"));
mkdirSync(dataDir, { recursive: true });
const log = createLogger({ service: "supervisor" });
const secretFile = localSecretPath(dataDir);
ensureLocalSecret(dataDir);

const specs = discoverServices(join(root, "services"));
const supervisor = new Supervisor({
  env: { LOOPGUARD_DATA_DIR: dataDir, LOOPGUARD_AUTH_SECRET_FILE: secretFile },
  log,
  output: (_service, line) => process.stdout.write(`${line}\n`),
});

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info("stopping the suite", { signal });
    void supervisor.stop().then(() => process.exit(0));
  });
}

await supervisor.start(specs);
const rows = specs.map((s) => `  ${s.name.padEnd(12)} grpc 127.0.0.1:${s.port}   metrics http://127.0.0.1:${s.metricsPort}/metrics`);
process.stdout.write(
  [
    "",
    `loopguard is up (data in ${dataDir}):`,
    ...rows,
    "",
    "Try a tool through server reflection:",
    '  TOKEN=$(pnpm -s mint-token --scope kb:read)',
    '  pnpm -s buf curl --protocol grpc --http2-prior-knowledge -H "authorization: Bearer $TOKEN" \\',
    '    -d \'{"query":"refund","limit":3}\' http://127.0.0.1:50061/loopguard.kb.v1.KbSearchService/Search',
    "Stop with Ctrl-C.",
    "",
  ].join("\n"),
);
