export { sqliteModes } from "./files.js";
export { type ErrorClass, errorOf, refusal } from "./errors.js";
export { freePort, kill, repoRoot, type ServiceProcess, spawnService, type TempDir, tempDir } from "./processes.js";
