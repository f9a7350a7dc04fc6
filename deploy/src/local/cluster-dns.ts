// The DNS a Kubernetes cluster gives its pods, for the local containers: every service of
// namespace "loopguard" is a headless Service whose name answers every replica's address
// (<service>.loopguard.svc.cluster.local, and the shorter forms <service>.loopguard.svc,
// <service>.loopguard, <service>). Records come from a JSON file { "<service>": ["127.0.0.10", …] }
// that `pnpm containers` rewrites as it scales; it is read again whenever it changes.
import { readFileSync, statSync } from "node:fs";
import { createServer, type DnsServer, Packet } from "dns2";
import { CLUSTER_DOMAIN, NAMESPACE } from "../manifests/cluster-names.js";

/** What a pod's /etc/resolv.conf searches, as the kubelet writes it. */
export const SEARCH_DOMAINS = [`${NAMESPACE}.svc.${CLUSTER_DOMAIN}`, `svc.${CLUSTER_DOMAIN}`, CLUSTER_DOMAIN];

export type Records = Readonly<Record<string, readonly string[]>>;

/** The service a query names, or undefined when the name is not one of the namespace's. */
export function serviceOf(name: string): string | undefined {
  const labels = name.toLowerCase().replace(/\.$/, "").split(".");
  const suffix = labels.slice(1).join(".");
  const forms = ["", NAMESPACE, `${NAMESPACE}.svc`, `${NAMESPACE}.svc.${CLUSTER_DOMAIN}`];
  return labels[0] && forms.includes(suffix) ? labels[0] : undefined;
}

/** Answer records (A only) for a question; undefined means NXDOMAIN. */
export function answer(records: Records, name: string, type: number): string[] | undefined {
  const service = serviceOf(name);
  const addresses = service === undefined ? undefined : records[service];
  if (!addresses || addresses.length === 0) return undefined;
  // AAAA and other types of a known name: NOERROR with no answer, so resolvers keep the A records.
  return type === Packet.TYPE.A ? [...addresses] : [];
}

function recordsReader(file: string): () => Records {
  let seen = -1;
  let records: Records = {};
  return () => {
    try {
      const mtime = statSync(file).mtimeMs;
      if (mtime !== seen) {
        records = JSON.parse(readFileSync(file, "utf8")) as Records;
        seen = mtime;
      }
    } catch {
      // A file being replaced or missing: keep answering from the last good records.
    }
    return records;
  };
}

const NXDOMAIN = 3;

export async function startClusterDns(options: {
  host: string;
  port: number;
  recordsFile: string;
}): Promise<DnsServer> {
  const read = recordsReader(options.recordsFile);
  const server = createServer({
    udp: true,
    tcp: true,
    handle: (request, send) => {
      const response = Packet.createResponseFromRequest(request);
      const question = request.questions[0];
      const found = question ? answer(read(), question.name, question.type) : undefined;
      if (found === undefined) response.header.rcode = NXDOMAIN;
      for (const address of found ?? []) {
        // A short TTL, as a headless Service's records change as pods come and go.
        response.answers.push(
          Packet.createResourceFromQuestion(question!, {
            type: Packet.TYPE.A,
            class: Packet.CLASS.IN,
            ttl: 5,
            address,
          }),
        );
      }
      response.header.aa = 1;
      void send(response);
    },
  });
  await server.listen({
    udp: { port: options.port, address: options.host },
    tcp: { port: options.port, address: options.host },
  });
  return server;
}
