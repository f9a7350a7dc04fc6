// Replica lists ("kb-0.kb:50061,kb-1.kb:50061") as one grpc-js channel. grpc-js's `ipv4:`/`ipv6:`
// schemes take IP literals only, and a `dns:` target names one host. This resolver runs grpc-js's
// own DNS resolver for each entry and hands the union of their addresses to the channel, so
// round_robin balances every call over every address of every entry (several channels, one per
// host, would balance per host, not per replica), and each entry is re-resolved whenever the
// channel asks (a connection went away, e.g. after the server's max connection age).
import { type ChannelOptions, experimental, status } from "@grpc/grpc-js";

const SCHEME = "loopguard-replicas";

type Endpoint = experimental.Endpoint;
type Listener = experimental.ResolverListener;

class ReplicaListResolver implements experimental.Resolver {
  readonly #entries: experimental.Resolver[];
  /** The last good answer of each entry: an entry that fails to resolve keeps its old addresses. */
  readonly #resolved: (Endpoint[] | undefined)[];
  readonly #errors: (string | undefined)[];

  constructor(target: experimental.GrpcUri, listener: Listener, options: ChannelOptions) {
    const hosts = target.path.split(",");
    this.#resolved = hosts.map(() => undefined);
    this.#errors = hosts.map(() => undefined);
    this.#entries = hosts.map((path, index) =>
      experimental.createResolver(
        { scheme: "dns", path },
        (endpoints, _attributes, _config, note) => {
          if (endpoints.ok) {
            this.#resolved[index] = endpoints.value;
            this.#errors[index] = undefined;
          } else {
            this.#errors[index] = endpoints.error.details;
          }
          const all = this.#resolved.flatMap((list) => list ?? []);
          if (all.length > 0) return listener(experimental.statusOrFromValue(all), {}, null, note);
          const details = this.#errors.filter(Boolean).join("; ") || `no address for ${target.path}`;
          listener(experimental.statusOrFromError({ code: status.UNAVAILABLE, details }), {}, null, note);
          return true;
        },
        options,
      ),
    );
  }

  updateResolution(): void {
    for (const entry of this.#entries) entry.updateResolution();
  }

  destroy(): void {
    for (const entry of this.#entries) entry.destroy();
    this.#resolved.fill(undefined);
    this.#errors.fill(undefined);
  }

  static getDefaultAuthority(target: experimental.GrpcUri): string {
    return target.path.split(",")[0]!;
  }
}

let registered = false;

/** The channel target for several "host:port" replicas (host names or IP literals). */
export function replicaListTarget(replicas: readonly string[]): string {
  if (!registered) {
    experimental.registerResolver(SCHEME, ReplicaListResolver);
    registered = true;
  }
  return `${SCHEME}:///${replicas.join(",")}`;
}
