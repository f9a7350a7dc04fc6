// The one blue-green model of a tool's release, whichever place runs it: the idle colour starts
// with the new image at the live replica count; a gated release (a rollback returns to a set that
// was judged before, so it is not) is judged before any client reaches it, and a failure removes
// it while the live colour stays; the tool's name flips to the new colour; clients get time to
// leave the old one; the gate judges again on every client's calls, and a failure flips back;
// then the old colour drains. The phases are data: the local containers (local.ts) run them as
// they come, Kubernetes's plain path (k8s-plain.ts) plans them as patches and waits that
// k8s-apply.ts runs. Argo Rollouts runs the same model in its controller (k8s-argo.ts).
import { type Colour, COLOURS } from "../manifests/release-objects.js";

export type GateWhen = "before the flip" | "after the flip";

export type Phase = "start" | "gate before the flip" | "flip" | "clients move" | "gate after the flip" | "drain";

const PHASES: readonly Phase[] = [
  "start",
  "gate before the flip",
  "flip",
  "clients move",
  "gate after the flip",
  "drain",
];

/** The phases of a release, in order; without the gate when it is not `gated`. */
export function blueGreenPhases(gated: boolean): readonly Phase[] {
  return PHASES.filter((phase) => gated || !phase.startsWith("gate"));
}

/** The colour a release starts: the one that is not live. */
export function idleColour(live: Colour): Colour {
  return COLOURS.find((c) => c !== live)!;
}

/**
 * What a place does in each phase. `gate` judges the new colour and, when it fails, undoes the
 * release so far (before the flip: the new colour goes; after it: the name flips back) and throws.
 */
export interface BlueGreenDriver<R> {
  start(): R;
  gate(when: GateWhen): R;
  flip(): R;
  clientsMove(): R;
  drain(): R;
}

/** The driver's call for one phase. */
export function stepOf<R>(driver: BlueGreenDriver<R>, phase: Phase): () => R {
  const steps: Record<Phase, () => R> = {
    start: () => driver.start(),
    "gate before the flip": () => driver.gate("before the flip"),
    flip: () => driver.flip(),
    "clients move": () => driver.clientsMove(),
    "gate after the flip": () => driver.gate("after the flip"),
    drain: () => driver.drain(),
  };
  return steps[phase];
}

/** Runs a release through the phases as it goes (a failed gate throws and ends it); when each phase ended. */
export async function driveBlueGreen(
  driver: BlueGreenDriver<Promise<void>>,
  gated: boolean,
): Promise<Partial<Record<Phase, string>>> {
  const ended: Partial<Record<Phase, string>> = {};
  for (const phase of blueGreenPhases(gated)) {
    await stepOf(driver, phase)();
    ended[phase] = new Date().toISOString();
  }
  return ended;
}

/** Plans a release through the phases, each phase adding its steps to a plan. */
export function planBlueGreen(driver: BlueGreenDriver<void>, gated: boolean): void {
  for (const phase of blueGreenPhases(gated)) stepOf(driver, phase)();
}
