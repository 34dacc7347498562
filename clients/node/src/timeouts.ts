/**
 * The limiter's `timeoutMs` on every call, with one timer per limiter rather than one per
 * call: every call gets the same timeout, so their deadlines come in the order the calls
 * start, and a queue in that order needs one timer, armed for the first deadline still
 * pending. A call that gets no reply by its deadline is rejected with RedisTimeoutError
 * then, as a timer of its own would have; a reply after that is ignored (and its failure is
 * no unhandled rejection). The timer keeps the process alive only while a call is pending,
 * as the per-call timers did.
 */
import { RedisTimeoutError } from './errors';

interface Pending {
  /** performance.now() ms. */
  readonly deadline: number;
  /** undefined once the call has settled (or timed out). */
  reject: ((err: Error) => void) | undefined;
}

export class Timeouts {
  private queue: Pending[] = [];
  private head = 0;
  /** Calls not settled yet. */
  private pending = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly expireAll = (): void => this.expire();

  constructor(readonly ms: number) {}

  /** `call`, rejected with RedisTimeoutError when it has not settled `ms` from now. */
  bound<T>(call: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const p: Pending = { deadline: performance.now() + this.ms, reject };
      this.queue.push(p);
      if (this.pending++ === 0) {
        if (this.timer === undefined) this.timer = setTimeout(this.expireAll, this.ms);
        else this.timer.ref();
      }
      call.then((value) => {
        if (this.settle(p)) resolve(value);
      }, (err: unknown) => {
        if (this.settle(p)) reject(err);
      });
    });
  }

  /** Marks `p` settled; false when it had timed out already. */
  private settle(p: Pending): boolean {
    if (p.reject === undefined) return false;
    p.reject = undefined;
    if (--this.pending === 0) {
      // Nothing pending: the queue holds only settled calls, and the armed timer no longer
      // keeps the process alive (it is kept for the next call, to be rearmed by expire()).
      this.queue.length = 0;
      this.head = 0;
      this.timer?.unref();
    }
    return true;
  }

  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    const q = this.queue;
    let i = this.head;
    for (; i < q.length; i++) {
      const p = q[i]!;
      if (p.reject === undefined) continue;
      if (p.deadline > now) break;
      const reject = p.reject;
      p.reject = undefined;
      this.pending -= 1;
      reject(new RedisTimeoutError(this.ms));
    }
    if (i === q.length) {
      q.length = 0;
      this.head = 0;
      return;
    }
    if (i > 1024 && i * 2 > q.length) {
      this.queue = q.slice(i);
      this.head = 0;
    } else {
      this.head = i;
    }
    this.timer = setTimeout(this.expireAll, Math.max(1, q[i]!.deadline - now));
  }
}
