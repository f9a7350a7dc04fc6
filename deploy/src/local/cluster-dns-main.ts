// Runs the cluster DNS (cluster-dns.ts) in the foreground until SIGTERM; `pnpm containers up`
// starts it in a container of its own: node cluster-dns-main.js <host> <port> <records file>.
import { startClusterDns } from "./cluster-dns.js";

const [host, port, recordsFile] = process.argv.slice(2);
if (!host || !port || !recordsFile) {
  process.stderr.write("usage: cluster-dns-main.js <host> <port> <records file>\n");
  process.exit(2);
}
const server = await startClusterDns({ host, port: Number(port), recordsFile });
process.stdout.write(`cluster DNS answering on ${host}:${port} from ${recordsFile}\n`);
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => void server.close().then(() => process.exit(0)));
}
