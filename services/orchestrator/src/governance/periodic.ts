// A background task on one timer per process: run now, then every interval, one run at a time (a
// run asked for while one is in flight joins it, so a slow store makes a gap, not a pile-up).
// A task extends it and writes `task()`.
export abstract class Periodic<T> {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<T> | undefined;
  #stopped = false;

  constructor(private readonly intervalMs: number) {}

  /** One run of the task. */
  protected abstract task(): Promise<T>;

  /** Set once stop() was called: a long run may end early between two of its steps. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Runs now and every `intervalMs`; the timer does not keep the process alive. */
  start(): void {
    if (this.#timer) return;
    void this.run();
    this.#timer = setInterval(() => void this.run(), this.intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and waits for the run in flight. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  /** Runs the task now (or joins the run in flight). */
  run(): Promise<T> {
    this.#running ??= this.task().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }
}
