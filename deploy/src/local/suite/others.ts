// Which container suites this Docker engine holds. Every suite's pods use the same loopback
// addresses and volume names, and the cluster DNS binds 127.0.0.9:53 for one suite's records: a
// second suite beside one (or beside what an interrupted run left) would serve the other's names and
// data. So `pnpm containers up` and `pnpm drill` start only when no other suite is there.
import { docker } from "../docker.js";
import { SuiteError } from "./state.js";

/** The label on every container and volume of a suite; its value is the suite's state folder. */
export const SUITE_LABEL = "io.loopguard.containers";

/** The state folders of every suite with a container or a volume here, each once. */
async function suitesPresent(): Promise<string[]> {
  const format = `{{.Label "${SUITE_LABEL}"}}`;
  const [containers, volumes] = await Promise.all([
    docker(["ps", "--all", "--filter", `label=${SUITE_LABEL}`, "--format", format]),
    docker(["volume", "ls", "--filter", `label=${SUITE_LABEL}`, "--format", format]),
  ]);
  return [...new Set(`${containers}\n${volumes}`.split("\n").filter(Boolean))];
}

/** Refuses, naming how to remove it, when a suite other than the one in `own` (a state folder) has a container or a volume here. */
export async function requireNoOtherSuite(own?: string): Promise<void> {
  const other = (await suitesPresent()).find((stateDir) => stateDir !== own);
  if (other === undefined) return;
  const dataDir = other.replace(/\/containers$/, "");
  throw new SuiteError(
    `a loopguard container suite is already up (its data in ${dataDir}): remove it first with \`LOOPGUARD_DATA_DIR=${dataDir} pnpm containers down\``,
  );
}
