import { createServer } from "node:net";
import { SuiteError } from "./state.js";

/** Fails with one line when something already listens where a pod must. */
export async function requireFree(host: string, ports: readonly number[]): Promise<void> {
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, host, () => server.close(() => resolve(true)));
    });
    if (!free) throw new SuiteError(`${host}:${port} is in use (is \`pnpm start\` running?)`);
  }
}
