export { sqliteModes } from "./files.js";
export { type ErrorClass, errorOf, refusal } from "./errors.js";
export {
  freePort,
  kill,
  repoRoot,
  type ServiceProcess,
  shellEnv,
  spawnService,
  type TempDir,
  tempDir,
  unlessEnded,
} from "./processes.js";
