// Last good responses of read-only methods, keyed by the canonical request bytes, served (with
// their age) when the live call fails or the breaker is open.
import { LRUCache } from "lru-cache";

export interface CachedResponse {
  readonly response: unknown;
  readonly storedAt: number;
}

export class ResponseCache {
  readonly #lru: LRUCache<string, CachedResponse>;

  constructor(maxEntries: number, maxAgeMs: number) {
    this.#lru = new LRUCache({ max: maxEntries, ttl: maxAgeMs });
  }

  static key(path: string, requestBytes: Uint8Array): string {
    return `${path}\u0000${Buffer.from(requestBytes.buffer, requestBytes.byteOffset, requestBytes.byteLength).toString("latin1")}`;
  }

  set(key: string, response: unknown, now: number): void {
    this.#lru.set(key, { response, storedAt: now });
  }

  get(key: string): CachedResponse | undefined {
    return this.#lru.get(key);
  }
}
