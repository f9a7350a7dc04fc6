import { describe, expect, it } from "vitest";
import { type BlueGreenDriver, blueGreenPhases, driveBlueGreen, idleColour, planBlueGreen } from "./blue-green.js";

/** A driver that records each phase and fails the gate named in `failing`. */
function recorder(failing?: string) {
  const seen: string[] = [];
  const step = (name: string) => () => {
    seen.push(name);
  };
  const driver: BlueGreenDriver<void> = {
    start: step("start"),
    gate: (when) => {
      seen.push(`gate ${when}`);
      if (when === failing) throw new Error(`gate ${when} failed`);
    },
    flip: step("flip"),
    clientsMove: step("clients move"),
    drain: step("drain"),
  };
  return { seen, driver };
}

const asAsync = (driver: BlueGreenDriver<void>): BlueGreenDriver<Promise<void>> => ({
  start: async () => driver.start(),
  gate: async (when) => driver.gate(when),
  flip: async () => driver.flip(),
  clientsMove: async () => driver.clientsMove(),
  drain: async () => driver.drain(),
});

describe("the blue-green model", () => {
  it("starts the idle colour, gates it, flips, lets clients move, gates again, then drains the old colour", () => {
    const { seen, driver } = recorder();
    planBlueGreen(driver, true);
    expect(seen).toEqual(["start", "gate before the flip", "flip", "clients move", "gate after the flip", "drain"]);
  });

  it("goes without the gate when it is not gated (a rollback)", () => {
    expect(blueGreenPhases(false)).toEqual(["start", "flip", "clients move", "drain"]);
  });

  it("never flips when the gate before the flip fails", async () => {
    const { seen, driver } = recorder("before the flip");
    await expect(driveBlueGreen(asAsync(driver), true)).rejects.toThrow("gate before the flip failed");
    expect(seen).toEqual(["start", "gate before the flip"]);
  });

  it("never drains the old colour when the gate after the flip fails", async () => {
    const { seen, driver } = recorder("after the flip");
    await expect(driveBlueGreen(asAsync(driver), true)).rejects.toThrow("gate after the flip failed");
    expect(seen).not.toContain("drain");
  });

  it("says when each phase ended, in order", async () => {
    const ended = await driveBlueGreen(asAsync(recorder().driver), true);
    expect(Object.keys(ended)).toEqual(blueGreenPhases(true));
    const times = Object.values(ended).map((t) => Date.parse(t));
    expect(times).toEqual([...times].sort((a, b) => a - b));
  });

  it("releases to the colour that is not live", () => {
    expect(idleColour("blue")).toBe("green");
    expect(idleColour("green")).toBe("blue");
  });
});
