// The runner's view of a Kubernetes API served on loopback by a test (no cluster runs here).
import { KubeConfig } from "@kubernetes/client-node";

/** The runner's service-account token, as the fake API servers see it on every call. */
export const RUNNER_TOKEN = "runner-service-account-token";

/** A KubeConfig for the API server on 127.0.0.1:`port`, as the runner in namespace loopguard. */
export function loopbackKubeConfig(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "fake", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "runner", token: RUNNER_TOKEN }],
    contexts: [{ name: "fake", cluster: "fake", user: "runner", namespace: "loopguard" }],
    currentContext: "fake",
  });
  return kc;
}
