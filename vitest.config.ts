import { defineConfig } from "vitest/config";

// Every workspace package is a vitest project, so a new service's tests run without editing a list.
export default defineConfig({
  test: {
    projects: ["services/*", "deploy", "test"],
  },
});
