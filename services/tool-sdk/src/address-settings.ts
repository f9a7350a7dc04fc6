// Hosts and addresses read from the environment, checked at start: a stray space, a scheme or a
// missing port would otherwise surface only when the service binds or makes its first call
// ("Name resolution failed for target …"), without naming the variable that holds it.
import { isIPv6 } from "node:net";
import { ConfigError, type Env } from "./settings.js";

/** A DNS name or an IPv4 literal: letters, digits, dots and hyphens, neither first nor last a dot or hyphen. */
const NAME = "[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?";
const HOST = new RegExp(`^${NAME}$`);
const HOST_PORT = new RegExp(`^(?:\\[[0-9A-Fa-f:.]+\\]|${NAME}):(\\d{1,5})$`);
/**
 * "dns:///name:port", "dns://server:53/name:port", "ipv4:…": a scheme gRPC resolves, not a host
 * name followed by a port; "http://…" is none of them.
 */
const GRPC_TARGET = /^(?:dns|ipv4|ipv6|unix|unix-abstract):(?!\d+(?:,|$))\S+$/;

function isHostPort(value: string): boolean {
  const port = Number(HOST_PORT.exec(value)?.[1] ?? 0);
  return port >= 1 && port <= 65535;
}

/** `name` as a host to listen on (a DNS name or an IP literal, without scheme or port), or `fallback` when unset. */
export function hostSetting(env: Env, name: string, fallback: string): string {
  const value = env[name] || fallback;
  if (!HOST.test(value) && !isIPv6(value))
    throw new ConfigError(`${name} must be a host name or an IP address, without scheme or port, got "${value}"`);
  return value;
}

/** `name` as one gRPC address: host:port (IPv6 in brackets) or one target such as "dns:///name:port". */
export function targetSetting(env: Env, name: string, fallback: string): string {
  const value = (env[name] || fallback).trim();
  if (!GRPC_TARGET.test(value) && !isHostPort(value))
    throw new ConfigError(`${name} must be host:port or one target like dns:///name:port, got "${value}"`);
  return value;
}

/**
 * `name` as a service's replicas: "host:port[,host:port…]" (host names or IP literals, IPv6 in
 * brackets), or one gRPC target such as "dns:///<tool>.loopguard.svc.cluster.local:<port>".
 */
export function targetsSetting(env: Env, name: string, fallback: string): string[] {
  const value = (env[name] || fallback).trim();
  if (GRPC_TARGET.test(value)) return [value];
  const list = value.split(",").map((t) => t.trim());
  const bad = list.find((t) => !isHostPort(t));
  if (bad !== undefined)
    throw new ConfigError(`${name} must be host:port[,host:port…] or one target like dns:///name:port, got "${bad}"`);
  return list;
}
