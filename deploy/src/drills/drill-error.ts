/** A run that could not be made (no Docker, images missing, another suite up): one line, exit 1. */
export class DrillError extends Error {
  override readonly name = "DrillError";
}
