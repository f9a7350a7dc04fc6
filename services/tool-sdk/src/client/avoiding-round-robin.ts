// grpc-js's round_robin, with a per-call say in which addresses a call must not or should not use.
// A hedge must land on another replica than the attempt it races, and round robin alone only makes
// that likely (other calls take picks in between). grpc-js lets a policy wrap its child's picker
// and read the call's metadata at pick time; this one re-picks (round robin moves on with every
// pick) past the addresses named in two internal headers, which it strips before the call is sent:
//   AVOID_HEADER   the call must not use them (a hedge; dropped with UNAVAILABLE if nothing else is ready),
//   PREFER_NOT_HEADER   the call uses them only when nothing else is ready (replicas found slow).
// A third, PICK_HEADER, names a watch (watchPick) told the address the call started on (grpc-js's
// getPeer() says "unknown" until the server's first metadata, which a slow replica sends late) and
// the replicas ready then and later (connected: a hedge with no other one ready is not sent).
// No package offers this; the policy is the small wrapper grpc-js's experimental API is meant for.
import { type ChannelOptions, connectivityState, experimental, Metadata, status } from "@grpc/grpc-js";

export const LB_POLICY_NAME = "loopguard_avoiding_round_robin";
export const AVOID_HEADER = "loopguard-lb-avoid";
export const PREFER_NOT_HEADER = "loopguard-lb-prefer-not";
export const PICK_HEADER = "loopguard-lb-pick";
/** The status details of a hedge no other replica could take. */
export const NO_OTHER_REPLICA = "loopguard: no other replica is ready for a hedge";

const { PickResultType } = experimental;

function listOf(metadata: Metadata, header: string): string[] {
  const values = metadata.get(header);
  if (values.length === 0) return [];
  metadata.remove(header);
  return values.flatMap((v) => String(v).split(","));
}

/** Told the address a call started on, and the addresses of the channel's replicas ready (connected) at any time. */
export type PickStarted = (address: string, ready: () => readonly string[]) => void;

/** Watches by id (PICK_HEADER's value). */
const watches = new Map<string, PickStarted>();
let lastWatch = 0;

export interface PickWatch {
  /** PICK_HEADER's value for the call watched. */
  readonly id: string;
  /** The call ended: nothing more to tell. */
  stop(): void;
}

/** Has the balancer tell `started` the address of the replica a call starts on, the call carrying PICK_HEADER `id`. */
export function watchPick(started: PickStarted): PickWatch {
  const id = String(++lastWatch);
  watches.set(id, started);
  return { id, stop: () => watches.delete(id) };
}

/** The pick, telling the call's watch its address once grpc-js starts the call there (it may pick again before). */
function reported(
  result: experimental.PickResult,
  started: PickStarted,
  ready: () => readonly string[],
): experimental.PickResult {
  const address = result.pickResultType === PickResultType.COMPLETE ? result.subchannel?.getAddress() : undefined;
  if (address === undefined) return result;
  return {
    ...result,
    onCallStarted: () => {
      started(address, ready);
      result.onCallStarted?.call(result);
    },
  };
}

class AvoidingPicker implements experimental.Picker {
  constructor(
    readonly inner: experimental.Picker,
    readonly ready: () => readonly string[],
  ) {}

  pick(args: experimental.PickArgs): experimental.PickResult {
    // pick() gets a fresh copy of the call's metadata each time, the one sent: removing the headers here keeps them off the wire.
    const watch = listOf(args.metadata, PICK_HEADER)[0];
    const started = watch === undefined ? undefined : watches.get(watch);
    const result = this.#avoiding(args);
    return started ? reported(result, started, this.ready) : result;
  }

  #avoiding(args: experimental.PickArgs): experimental.PickResult {
    const avoid = listOf(args.metadata, AVOID_HEADER);
    const preferNot = listOf(args.metadata, PREFER_NOT_HEADER);
    if (avoid.length === 0 && preferNot.length === 0) return this.inner.pick(args);
    let fallback: experimental.PickResult | undefined;
    // Every pick moves round robin on by one, so this many picks meet every named address and one more.
    for (let tries = avoid.length + preferNot.length + 1; tries > 0; tries--) {
      const result = this.inner.pick(args);
      const address = result.pickResultType === PickResultType.COMPLETE ? result.subchannel?.getAddress() : undefined;
      if (address === undefined) return result;
      if (avoid.includes(address)) continue;
      if (!preferNot.includes(address)) return result;
      fallback ??= result;
    }
    if (fallback) return fallback;
    return {
      pickResultType: PickResultType.DROP,
      subchannel: null,
      status: { code: status.UNAVAILABLE, details: NO_OTHER_REPLICA, metadata: new Metadata() },
      onCallStarted: null,
      onCallEnded: null,
    };
  }
}

class AvoidingRoundRobinConfig implements experimental.TypedLoadBalancingConfig {
  getLoadBalancerName(): string {
    return LB_POLICY_NAME;
  }
  toJsonObject(): object {
    return { [LB_POLICY_NAME]: {} };
  }
  static createFromJson(): AvoidingRoundRobinConfig {
    return new AvoidingRoundRobinConfig();
  }
}

class AvoidingRoundRobin implements experimental.LoadBalancer {
  readonly #child: experimental.ChildLoadBalancerHandler;
  readonly #roundRobin = experimental.parseLoadBalancingConfig({ round_robin: {} });
  /** The subchannel round robin made last for each address, and the addresses the resolver lists now. */
  readonly #subchannels = new Map<string, experimental.SubchannelInterface>();
  #listed = new Set<string>();
  readonly #ready = () =>
    [...this.#listed].filter(
      (address) => this.#subchannels.get(address)?.getConnectivityState() === connectivityState.READY,
    );

  constructor(helper: experimental.ChannelControlHelper) {
    this.#child = new experimental.ChildLoadBalancerHandler(
      experimental.createChildChannelControlHelper(helper, {
        createSubchannel: (address, args) => {
          const subchannel = helper.createSubchannel(address, args);
          this.#subchannels.set(subchannel.getAddress(), subchannel);
          return subchannel;
        },
        updateState: (state, picker, message) =>
          helper.updateState(state, new AvoidingPicker(picker, this.#ready), message),
      }),
    );
  }

  updateAddressList(
    endpoints: experimental.StatusOr<experimental.Endpoint[]>,
    _config: experimental.TypedLoadBalancingConfig,
    options: ChannelOptions,
    note: string,
  ): boolean {
    if (endpoints.ok) {
      this.#listed = new Set(endpoints.value.flatMap((e) => e.addresses.map(experimental.subchannelAddressToString)));
      for (const address of this.#subchannels.keys()) if (!this.#listed.has(address)) this.#subchannels.delete(address);
    }
    return this.#child.updateAddressList(endpoints, this.#roundRobin, options, note);
  }
  exitIdle(): void {
    this.#child.exitIdle();
  }
  resetBackoff(): void {
    this.#child.resetBackoff();
  }
  destroy(): void {
    this.#child.destroy();
  }
  getTypeName(): string {
    return LB_POLICY_NAME;
  }
}

let registered = false;

/** The channel's service config: round robin over every address, with the avoid headers honoured. */
export function avoidingRoundRobinServiceConfig(): string {
  if (!registered) {
    experimental.registerLoadBalancerType(LB_POLICY_NAME, AvoidingRoundRobin, AvoidingRoundRobinConfig);
    registered = true;
  }
  return JSON.stringify({ loadBalancingConfig: [{ [LB_POLICY_NAME]: {} }] });
}
