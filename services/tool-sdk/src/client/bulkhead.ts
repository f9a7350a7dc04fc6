// One tool's bulkhead: at most maxInFlight calls running and maxQueue more waiting, first come first
// served. Ours rather than cockatiel's: its queue keeps a waiter whose signal aborted until a slot
// frees (the place stays taken, and a freed slot can go unused), and a caller that gave up must
// leave the queue at once (stages/bulkhead.ts).

/** Called when a queued waiter is given its slot. */
export type Admit = () => void;

export class Bulkhead {
  #inFlight = 0;
  /** Insertion-ordered, and a waiter that gives up leaves from anywhere in it in O(1). */
  readonly #queue = new Set<Admit>();

  constructor(
    readonly maxInFlight: number,
    readonly maxQueue: number,
  ) {}

  get inFlight(): number {
    return this.#inFlight;
  }

  get queued(): number {
    return this.#queue.size;
  }

  /** Takes a free slot; false when every slot is taken. */
  tryEnter(): boolean {
    if (this.#inFlight >= this.maxInFlight) return false;
    this.#inFlight++;
    return true;
  }

  /** Waits in line: `admit` runs when a slot is handed over. False when the queue is full. */
  enqueue(admit: Admit): boolean {
    if (this.#queue.size >= this.maxQueue) return false;
    this.#queue.add(admit);
    return true;
  }

  /** Gives up a place in line; false when the waiter already has its slot. */
  leaveQueue(admit: Admit): boolean {
    return this.#queue.delete(admit);
  }

  /** Gives a slot back: straight to the first waiter, if any. */
  leave(): void {
    if (this.#queue.size === 0) {
      this.#inFlight--;
      return;
    }
    const next = this.#queue.values().next().value as Admit;
    this.#queue.delete(next);
    next();
  }
}
