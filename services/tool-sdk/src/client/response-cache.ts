// Last good responses of read-only methods, keyed by the canonical request bytes, served (with
// their age) when the live call fails or the breaker is open. Bounded by entries and by the
// responses' size on the wire (a decoded message holds a few times that), so a tool whose reads
// answer in megabytes cannot fill the heap with its last thousand answers.
import { LRUCache } from "lru-cache";

export interface CachedResponse {
  readonly response: unknown;
  /**
   * performance.now() when the call that read it was sent (its age is from then: the tool read it
   * no earlier), on a clock that a step of the wall clock (NTP) does not bend.
   */
  readonly readAt: number;
}

/** The size on the wire of each response the client decoded (chain.ts records it), for the cache's bound. */
export const wireBytes = new WeakMap<object, number>();

/** The default bound of a client's fallback cache: a few times this in heap. */
export const DEFAULT_CACHE_MAX_BYTES = 16 * 1024 * 1024;

/** What an entry costs beside its response and key: the entry's own objects. */
const ENTRY_OVERHEAD_BYTES = 64;

export class ResponseCache {
  readonly #lru: LRUCache<string, CachedResponse>;

  /** `maxBytes`: keys and responses on the wire together; one response over a quarter of it is not kept. */
  constructor(maxEntries: number, maxAgeMs: number, maxBytes: number) {
    this.#lru = new LRUCache({
      max: maxEntries,
      ttl: maxAgeMs,
      maxSize: maxBytes,
      maxEntrySize: Math.max(1, Math.floor(maxBytes / 4)),
      sizeCalculation: (value, key) =>
        key.length + ENTRY_OVERHEAD_BYTES + (wireBytes.get(value.response as object) ?? 0),
    });
  }

  static key(path: string, requestBytes: Uint8Array): string {
    return `${path}\u0000${Buffer.from(requestBytes.buffer, requestBytes.byteOffset, requestBytes.byteLength).toString("latin1")}`;
  }

  /**
   * Keeps `response`, read by a call sent at `readAt`, unless the entry holds one read later: of two
   * calls at once, the older answer arriving last does not replace the newer.
   */
  set(key: string, response: unknown, readAt: number): void {
    const held = this.#lru.peek(key);
    if (held && held.readAt > readAt) return;
    this.#lru.set(key, { response, readAt });
  }

  /** Forgets the answer to a request the tool has since answered otherwise (it refused it: the entity is gone, say). */
  delete(key: string): void {
    this.#lru.delete(key);
  }

  get(key: string): CachedResponse | undefined {
    return this.#lru.get(key);
  }
}
