/**
 * The outage circuit: while Redis answers each call is one command and the circuit costs a
 * property read. A call that fails with an outage error opens it; then every call is
 * answered at once without Redis (fail-open or fail-closed), and at most once per
 * `probeIntervalMs` one call starts a probe in the background that no request waits on.
 * The first probe that gets an answer closes it. One warning when an outage starts, one
 * line when it ends.
 */
import { isOutage, serverAnswered } from './errors';

export interface Logger {
  warn(message: string): void;
  error(message: string): void;
}

export type Gate = 'call' | 'skip' | 'probe';

export interface CircuitOptions {
  failOpen?: boolean;
  onError?: (err: Error) => void;
  probeIntervalMs?: number;
  logger?: Logger;
}

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

export class Circuit {
  readonly failOpen: boolean;
  readonly probeIntervalMs: number;
  readonly onError: ((err: Error) => void) | undefined;
  readonly logger: Logger;
  /** Outages seen so far (each logged once). */
  outages = 0;
  /** Probes started so far. */
  probes = 0;
  private isDown = false;
  private isProbing = false;
  private since = 0;
  private nextProbe = 0;
  private answeredWithout = 0;
  private sawUnready = false;

  constructor(options: CircuitOptions = {}) {
    const interval = options.probeIntervalMs ?? 1000;
    if (!(interval > 0)) throw new RangeError('probeIntervalMs must be > 0');
    this.failOpen = options.failOpen ?? true;
    this.probeIntervalMs = interval;
    this.onError = options.onError;
    this.logger = options.logger ?? console;
  }

  get down(): boolean {
    return this.isDown;
  }

  /** A probe is in flight. */
  get probing(): boolean {
    return this.isProbing;
  }

  /**
   * `clientReady`: the client is connected now (false while it waits out its own reconnect
   * backoff). The first call that finds it connected again after a call of this outage found
   * it not connected starts a probe at once, without waiting for the next interval.
   */
  gate(clientReady = true): Gate {
    if (!this.isDown) return 'call';
    this.answeredWithout += 1;
    if (!clientReady) this.sawUnready = true;
    if (this.isProbing) return 'skip';
    const now = performance.now();
    if (now < this.nextProbe && !(clientReady && this.sawUnready)) return 'skip';
    this.isProbing = true;
    this.sawUnready = !clientReady;
    this.probes += 1;
    this.nextProbe = now + this.probeIntervalMs;
    return 'probe';
  }

  /** Records a failed call. False when `err` is no outage: the caller throws it. */
  failed(err: unknown): boolean {
    if (!isOutage(err)) return false;
    if (!this.isDown) {
      const now = performance.now();
      this.isDown = true;
      this.since = now;
      this.nextProbe = now + this.probeIntervalMs;
      this.sawUnready = false;
      this.answeredWithout = 0;
      this.outages += 1;
      const verdict = this.failOpen ? 'allowing (fail-open)' : 'denying (fail-closed)';
      this.logger.warn(
        `rate limiter: Redis unavailable (${describe(err)}); ${verdict} requests without `
        + `asking it until a probe (one every ${this.probeIntervalMs / 1000}s) gets an answer`);
    }
    this.hook(err as Error);
    return true;
  }

  /** Records how a probe ended: `err` undefined when it got a reply. */
  probed(err?: unknown): void {
    this.isProbing = false;
    const recovered = serverAnswered(err);
    if (recovered && this.isDown) {
      this.isDown = false;
      const seconds = (performance.now() - this.since) / 1000;
      this.logger.warn(
        `rate limiter: Redis reachable again after ${seconds.toFixed(1)}s; `
        + `${this.answeredWithout} requests were answered without it`);
    } else if (!recovered) {
      if (isOutage(err)) this.hook(err as Error);
      else this.logger.error(`rate limiter: probe failed unexpectedly: ${describe(err)}`);
    }
  }

  private hook(err: Error): void {
    if (this.onError === undefined) return;
    try {
      this.onError(err);
    } catch (hookErr) {
      this.logger.error(`rate limiter: onError hook threw: ${describe(hookErr)}`);
    }
  }
}
