/** Plain HTTP for the store tests: requests one after another, and window-boundary timing. */
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** An http.Server (an Express app's listen(0)) listening on loopback: its URL and a close. */
export async function listening(server: HttpServer): Promise<{ url: string; close: () => Promise<void> }> {
  if (!server.listening) await new Promise((ok) => server.once('listening', ok));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((ok) => server.close(() => ok())) };
}

/** The statuses of `n` requests sent one after another (as identity `user` when given: header x-user). */
export async function statuses(url: string, n: number, user?: string): Promise<number[]> {
  const headers = user === undefined ? undefined : { 'x-user': user };
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await fetch(url, { headers })).status);
  return out;
}

/** Waits until `ms` into a window of `windowMs` (the server's windows start at multiples of it; same clock here). */
export async function intoWindow(windowMs: number, ms: number): Promise<void> {
  const at = Date.now() % windowMs;
  await sleep(at <= ms ? ms - at : windowMs - at + ms);
}

/**
 * A burst late in one window, then one just past the boundary, each through `burst`
 * (`late` returns the statuses of the first, `early` of the second). The first must end
 * before the boundary and the second within `slackMs` of it, or the run proves nothing (a
 * loaded machine stalled): it is tried again with a fresh key (`attempt` tells the caller
 * which), up to 3 times. Resolves to both bursts' statuses.
 */
export async function acrossBoundary(windowMs: number, lateAt: number, earlyAt: number, slackMs: number,
  run: (attempt: number) => { late: () => Promise<number[]>; early: () => Promise<number[]> }): Promise<{ late: number[]; early: number[] }> {
  let last: { late: number[]; early: number[] } | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const { late, early } = run(attempt);
    await intoWindow(windowMs, lateAt);
    const windowStart = Date.now() - (Date.now() % windowMs);
    const first = await late();
    const lateInTime = Date.now() < windowStart + windowMs;
    await intoWindow(windowMs, earlyAt);
    const second = await early();
    const earlyInTime = Date.now() < windowStart + windowMs + slackMs;
    last = { late: first, early: second };
    if (lateInTime && earlyInTime) return last;
  }
  return last!; // three stalls in a row: assert anyway (the statuses say what happened)
}

/**
 * Waits for the next window of `windowMs` when fewer than `needMs` are left in this one. A
 * test that counts up to the limit must not straddle a boundary: the sliding estimate
 * weighs the previous window's count down and floors it (n requests just before a boundary
 * weigh n - 1 just after), so a burst across one is allowed one more than the limit.
 */
export async function clearOfBoundary(windowMs: number, needMs: number): Promise<void> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await sleep(left + 10);
}
