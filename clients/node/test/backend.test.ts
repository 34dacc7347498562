/**
 * backend 'auto' / 'module' / 'library': which code answers, found once, found again.
 *
 * On the library kinds (managed servers: no module, `enable-module-command no`; Redis 6.2:
 * no FUNCTION, EVALSHA) through both client libraries: what the first call sends and what
 * each later call sends (one command); the faults a managed service has, mid-traffic, with
 * concurrent callers (FUNCTION FLUSH, a restart without persistence, SCRIPT FLUSH on 6.2):
 * no call fails, none is answered degraded, at most one call per caller goes uncounted,
 * one detection and one load per fault, and the circuit never opens (no warning); a user
 * who may not load the library; an older library replaced, a newer one kept. On a module
 * server: a restart onto the same port without the module, mid-traffic.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BackendMissingError, LIBRARY_SHA, LIBRARY_VERSION, LOAD_COMMAND, LibraryNotLoadedError, SlidingWindowRateLimiter,
  adapterFor, librarySource, loadLibrary, type Adapter, type Logger,
} from '../src';
import { LIBS, connect, type Handle, type Lib } from './helpers/clients';
import {
  BASE_KINDS, LIBRARY_KINDS, Server, hasFunctions, kinds, libraryKindArgs, rawCommand, startLibraryKind,
  startServer, type LibraryKind,
} from './helpers/servers';

class Lines implements Logger {
  readonly lines: string[] = [];
  warn(m: string): void { this.lines.push(m); }
  error(m: string): void { this.lines.push(m); }
}

/** An adapter that records the name of every command it sends (to the key's node or to the primaries). */
function recording(client: object): { adapter: Adapter; sent: string[] } {
  const inner = adapterFor(client);
  const sent: string[] = [];
  const adapter: Adapter = {
    kind: inner.kind,
    send: (key, args, readonly) => { sent.push(args[0]!); return inner.send(key, args, readonly); },
    primaries: async () => (await inner.primaries()).map((send) => (args: readonly string[]) => {
      sent.push(args[0]!);
      return send(args);
    }),
  };
  return { adapter, sent };
}

function bulk(text: string): string {
  return `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/** FUNCTION LOAD REPLACE of `code`, over RESP (the operator's redis-cli). */
function functionLoad(port: number, code: string): Promise<string> {
  const parts = ['FUNCTION', 'LOAD', 'REPLACE', code];
  return rawCommand(port, `*${parts.length}\r\n${parts.map(bulk).join('')}`.replace(/\r\n$/, ''), 2000);
}

function withVersion(version: string): string {
  const code = librarySource().replace(`local VERSION = '${LIBRARY_VERSION}'`, `local VERSION = '${version}'`);
  assert.notEqual(code, librarySource());
  return code;
}

async function version(port: number): Promise<string> {
  return rawCommand(port, 'FCALL_RO slidingwindow_version 0');
}

const CALLERS = 8;
const WINDOW = 86400; // one day: every count of a run lands in one window or two
const LIMIT = 1_000_000_000; // nothing is refused: every allowed call counted once

interface Traffic {
  /** Calls answered allowed, not degraded (after the fault began, when `since` is used). */
  allowed: number;
  calls: number;
  degraded: number;
  failures: unknown[];
}

/**
 * CALLERS concurrent callers checking `id` in a loop; `fault` runs once traffic flows; the
 * callers stop a while after it. `since()` (optional) says from when an allowed call is
 * counted (for a restart, whose counts before are lost with the server).
 */
async function underTraffic(limiter: SlidingWindowRateLimiter, id: string, fault: () => Promise<void>,
  since: () => boolean = () => true): Promise<Traffic> {
  const t: Traffic = { allowed: 0, calls: 0, degraded: 0, failures: [] };
  let stop = false;
  const caller = async (): Promise<void> => {
    while (!stop) {
      try {
        const r = await limiter.check(id, LIMIT, WINDOW);
        t.calls += 1;
        if (r.degraded) {
          t.degraded += 1;
          await sleep(1); // answered without I/O: let the event loop run (a loop of microtasks starves it)
        } else if (r.allowed && since()) t.allowed += 1;
      } catch (err) {
        t.failures.push(err);
        if (t.failures.length > 1000) stop = true;
        await sleep(5);
      }
    }
  };
  const callers = Array.from({ length: CALLERS }, caller);
  await sleep(150);
  const before = t.calls;
  await fault();
  await sleep(300);
  stop = true;
  await Promise.all(callers);
  assert.ok(t.calls - before >= CALLERS * 2, `traffic did not flow through the fault: ${t.calls - before} calls after it`);
  return t;
}

/** What the key holds in its window (previous + current: the run may cross a window's start). */
async function counted(limiter: SlidingWindowRateLimiter, id: string): Promise<number> {
  const c = await limiter.counts(id, WINDOW);
  assert.equal(c.degraded, false);
  return c.previous + c.current;
}

/**
 * Whether a restart is an outage for this client library: for neither, since ioredis
 * resends the commands it had written once reconnected, and the node-redis adapter sends
 * a command rejected for the closed socket once more (src/adapters.ts, resentOnce).
 */
function restartIsOutage(_lib: Lib): boolean {
  return false;
}

/**
 * No call failed; none degraded (or, where the restart is an outage by the client
 * library, one outage: its warning and its recovery line, and no probe that failed
 * otherwise); at most one allowed call per caller uncounted.
 */
function assertHealed(t: Traffic, count: number, log: Lines, limiter: SlidingWindowRateLimiter, outage = false): void {
  assert.deepEqual(t.failures.map(String), [], 'a call failed');
  assert.ok(t.allowed >= count, `the key counts ${count}, more than the ${t.allowed} allowed`);
  assert.ok(t.allowed - count <= CALLERS, `${t.allowed - count} allowed calls uncounted (at most one per caller: ${CALLERS})`);
  assert.equal(limiter.circuit.down, false);
  if (outage && limiter.circuit.outages > 0) {
    assert.equal(limiter.circuit.outages, 1);
    assert.equal(log.lines.length, 2, log.lines.join('\n'));
    assert.match(log.lines[0]!, /Redis unavailable \(Error: (Socket closed unexpectedly|read ECONNRESET)\)/);
    assert.match(log.lines[1]!, /Redis reachable again/);
    return;
  }
  assert.equal(t.degraded, 0, 'a call was answered degraded (fail-open)');
  assert.deepEqual(log.lines, [], 'the circuit logged');
  assert.equal(limiter.circuit.outages, 0);
}

function libraryKindTests(kind: LibraryKind, lib: Lib): void {
  const functions = hasFunctions(kind);
  const mode = functions ? 'function' : 'eval';
  let server: Server;
  let admin: Handle;
  before(async () => {
    server = await startLibraryKind(kind);
    admin = await connect(lib, server.port);
  });
  after(async () => {
    await admin.close();
    await server.cleanup();
  });
  const fresh = async (): Promise<void> => {
    if (functions) await rawCommand(server.port, 'FUNCTION FLUSH');
    await rawCommand(server.port, 'SCRIPT FLUSH');
  };
  const limiterOf = (client: object, log: Lines, options: { timeoutMs?: number } = {}): SlidingWindowRateLimiter =>
    new SlidingWindowRateLimiter(client, { prefix: `b:${lib}:`, logger: log, ...options });

  test(`auto: the first call finds out (${mode}), then one command per call`, async () => {
    await fresh();
    const { adapter, sent } = recording(admin.client);
    const log = new Lines();
    const limiter = limiterOf(adapter, log);
    assert.equal(limiter.backend, 'auto');
    assert.deepEqual(await limiter.isAllowed(`a${Math.random()}`, 2, 60), [true, 1]);
    assert.deepEqual(sent, functions ? ['SLIDINGWINDOW.CHECK', 'FCALL_RO', 'FUNCTION', 'FCALL']
      : ['SLIDINGWINDOW.CHECK', 'FCALL_RO', 'EVALSHA', 'EVAL']);
    assert.equal(limiter.backend, 'library');
    assert.equal(limiter.backendState.mode, mode);
    sent.length = 0;
    const id = `b${Math.random()}`;
    await limiter.check(id, 2, 60);
    await limiter.peek(id, 2, 60);
    await limiter.refund(id, 2, 60);
    await limiter.counts(id, 60);
    assert.deepEqual(sent, functions ? ['FCALL', 'FCALL_RO', 'FCALL', 'FCALL_RO'] : ['EVALSHA', 'EVALSHA', 'EVALSHA', 'EVALSHA']);
    if (!functions) assert.equal(await rawCommand(server.port, `SCRIPT EXISTS ${LIBRARY_SHA}`), '*1\r\n:1\r\n');
    assert.deepEqual(log.lines, []);
  });

  test('concurrent first calls share one detection and one load, and are all counted', async () => {
    await fresh();
    const log = new Lines();
    const limiter = limiterOf(admin.client, log);
    const id = `c${Math.random()}`;
    const replies = await Promise.all(Array.from({ length: 16 }, () => limiter.check(id, 100, 60)));
    assert.deepEqual(replies.map((r) => r.count).sort((a, b) => a - b), Array.from({ length: 16 }, (_, i) => i + 1));
    assert.equal(limiter.backendState.detections, 1);
    assert.equal(limiter.backendState.loads, functions ? 1 : 0);
    // Then FUNCTION FLUSH (SCRIPT FLUSH): 16 concurrent calls again, one more detection and load.
    await fresh();
    const again = await Promise.all(Array.from({ length: 16 }, () => limiter.check(id, 100, 60)));
    assert.deepEqual(again.map((r) => r.count).sort((a, b) => a - b), Array.from({ length: 16 }, (_, i) => i + 17));
    assert.equal(limiter.backendState.detections, functions ? 2 : 1);
    assert.equal(limiter.backendState.loads, functions ? 2 : 0);
    assert.deepEqual(log.lines, []);
  });

  test("forced backends: 'module' throws unknown command (no outage), 'library' skips the module", async () => {
    const log = new Lines();
    const module = limiterOf(admin.client, log);
    const forced = new SlidingWindowRateLimiter(admin.client, { backend: 'module', logger: log });
    await assert.rejects(forced.check('m', 1, 10), { message: /unknown command/i });
    assert.equal(forced.circuit.down, false);
    const { adapter, sent } = recording(admin.client);
    const library = new SlidingWindowRateLimiter(adapter, { backend: 'library', logger: log });
    assert.equal(library.backend, 'library');
    await library.check(`l${Math.random()}`, 1, 10);
    assert.ok(!sent.includes('SLIDINGWINDOW.CHECK'), sent.join(' '));
    assert.throws(() => new SlidingWindowRateLimiter(admin.client, { backend: 'lua' as 'library' }), /backend 'lua'/);
    assert.equal(module.circuit.down, false);
    assert.deepEqual(log.lines, []);
  });

  test(`${functions ? 'FUNCTION FLUSH' : 'SCRIPT FLUSH'} mid-traffic (${CALLERS} callers): every call goes through, counted${functions ? ', one load' : ', no detection'}`, async (ctx) => {
    const log = new Lines();
    const limiter = limiterOf(admin.client, log);
    const id = `f${Math.random()}`;
    assert.equal((await limiter.check(id, LIMIT, WINDOW)).count, 1);
    const [detections, loads] = [limiter.backendState.detections, limiter.backendState.loads];
    const t = await underTraffic(limiter, id, async () => {
      await rawCommand(server.port, functions ? 'FUNCTION FLUSH' : 'SCRIPT FLUSH');
    });
    ctx.diagnostic(`${t.calls} calls, ${t.allowed} allowed, ${t.degraded} degraded, ${t.allowed + 1 - await counted(limiter, id)} uncounted`);
    assertHealed({ ...t, allowed: t.allowed + 1 }, await counted(limiter, id), log, limiter);
    if (functions) {
      assert.equal(limiter.backendState.detections - detections, 1, 'one detection for every caller');
      assert.equal(limiter.backendState.loads - loads, 1, 'one load for every caller');
      assert.equal(await version(server.port), bulk(LIBRARY_VERSION));
    } else {
      assert.equal(limiter.backendState.detections, detections, 'NOSCRIPT is answered by EVAL, no detection');
      assert.equal(await rawCommand(server.port, `SCRIPT EXISTS ${LIBRARY_SHA}`), '*1\r\n:1\r\n');
    }
  });

  test(`a restart without persistence mid-traffic (${CALLERS} callers): the library loaded again, no call fails${restartIsOutage(lib) ? '' : ' or fails open'}`, async (ctx) => {
    const log = new Lines();
    // The restart takes the server away for its start plus the client's reconnect backoff
    // (0.1-0.2 s here): with the default timeoutMs (500) ioredis saw no outage in 3 of 3
    // runs; 5000 so that a loaded machine does not make the restart one.
    const limiter = limiterOf(admin.client, log, { timeoutMs: 5000 });
    const id = `r${Math.random()}`;
    assert.equal((await limiter.check(id, LIMIT, WINDOW)).count, 1);
    const detections = limiter.backendState.detections;
    let restarted = false;
    const t = await underTraffic(limiter, id, async () => {
      await server.stop();
      restarted = true; // every reply from now on is the new server's
      await server.start();
    }, () => restarted);
    ctx.diagnostic(`${t.calls} calls, ${t.degraded} degraded, ${t.allowed} allowed after the restart, `
      + `${t.allowed - await counted(limiter, id)} uncounted, outages ${limiter.circuit.outages} ${log.lines.slice(1).join('')}`);
    assertHealed(t, await counted(limiter, id), log, limiter, restartIsOutage(lib));
    assert.equal(limiter.backendState.detections - detections, functions ? 1 : 0);
    if (functions) assert.equal(await version(server.port), bulk(LIBRARY_VERSION));
  });

  if (!functions) return;

  test('a user who may not FUNCTION LOAD gets LibraryNotLoadedError naming the command; no outage', async () => {
    await fresh();
    await rawCommand(server.port, `ACL SETUSER app${lib} on >pw ~* +@all -function`);
    const app = await connect(lib, server.port, { username: `app${lib}`, password: 'pw' });
    try {
      const log = new Lines();
      const limiter = limiterOf(app.client, log);
      const refused = await limiter.check('u', 5, 60).then(() => undefined, (err: unknown) => err);
      assert.ok(refused instanceof LibraryNotLoadedError, String(refused));
      assert.ok(refused instanceof BackendMissingError);
      assert.equal(refused.name, 'LibraryNotLoadedError');
      assert.ok(refused.message.includes(LOAD_COMMAND), refused.message);
      assert.match(refused.message, /on every primary/);
      assert.match(refused.message, /loadLibrary\(client\)/);
      assert.match(refused.message, /NOPERM/);
      assert.equal(limiter.circuit.down, false);
      assert.deepEqual(log.lines, []);
      // The operator loads it; the app's next call goes through.
      assert.equal(await loadLibrary(admin.client), 1);
      assert.equal((await limiter.check(`u${Math.random()}`, 5, 60)).count, 1);
      assert.equal(limiter.backendState.loads, 0);
    } finally {
      await app.close();
      await rawCommand(server.port, `ACL DELUSER app${lib}`);
    }
  });

  test('an older library that this user may not replace is used as it is, with one warning', async () => {
    assert.match(await functionLoad(server.port, withVersion('0.0.1')), /^\$/);
    await rawCommand(server.port, `ACL SETUSER old${lib} on >pw ~* +@all -function`);
    const app = await connect(lib, server.port, { username: `old${lib}`, password: 'pw' });
    try {
      const log = new Lines();
      const limiter = limiterOf(app.client, log);
      const id = `old${Math.random()}`;
      assert.equal((await limiter.check(id, 5, 60)).count, 1);
      assert.equal((await limiter.check(id, 5, 60)).count, 2);
      assert.equal(await version(server.port), bulk('0.0.1'), 'kept');
      assert.equal(limiter.backendState.loads, 0);
      assert.equal(log.lines.length, 1, log.lines.join('\n'));
      assert.match(log.lines[0]!, /older than this client's .* using it as it is/);
      assert.ok(log.lines[0]!.includes(LOAD_COMMAND));
      assert.equal(limiter.circuit.down, false);
    } finally {
      await app.close();
      await rawCommand(server.port, `ACL DELUSER old${lib}`);
      await loadLibrary(admin.client);
    }
  });

  test('an older library is replaced, a newer one kept', async () => {
    assert.match(await functionLoad(server.port, withVersion('0.0.1')), /^\$/);
    assert.equal(await version(server.port), bulk('0.0.1'));
    const log = new Lines();
    const limiter = limiterOf(admin.client, log);
    assert.equal((await limiter.check(`o${Math.random()}`, 5, 60)).count, 1);
    assert.equal(await version(server.port), bulk(LIBRARY_VERSION));
    assert.equal(limiter.backendState.loads, 1);
    // A newer one (another client's, in a rolling deploy) is kept: '99.0.0' against '0.x'.
    assert.match(await functionLoad(server.port, withVersion('99.0.0')), /^\$/);
    const other = limiterOf(admin.client, log);
    assert.equal((await other.check(`o${Math.random()}`, 5, 60)).count, 1);
    assert.equal(other.backendState.loads, 0);
    assert.equal(await version(server.port), bulk('99.0.0'));
    // Numerically, not as text: '0.10.0' is newer than '0.9.0'.
    const [major, minor] = LIBRARY_VERSION.split('.').map(Number) as [number, number];
    assert.match(await functionLoad(server.port, withVersion(`${major}.${minor + 10}.0`)), /^\$/);
    const third = limiterOf(admin.client, log);
    await third.check(`o${Math.random()}`, 5, 60);
    assert.equal(third.backendState.loads, 0);
    await loadLibrary(admin.client);
    assert.deepEqual(log.lines, []);
  });
}

for (const { name, skip } of kinds(LIBRARY_KINDS)) {
  for (const lib of LIBS) {
    describe(`backend [${name}] via ${lib}`, { skip }, () => libraryKindTests(name, lib));
  }
}

for (const { name, skip } of kinds(BASE_KINDS)) {
  describe(`backend [${name}]: the module, then a restart onto the same port without it`, { skip }, () => {
    for (const lib of LIBS) {
      test(`mid-traffic (${CALLERS} callers): the library loaded, no call fails${restartIsOutage(lib) ? '' : ' or fails open'} (${lib})`, async (ctx) => {
        const withModule = await startServer(name);
        const port = withModule.port;
        const bare = new Server(name, port, libraryKindArgs(`${name}-managed`));
        const handle = await connect(lib, port);
        try {
          const log = new Lines();
          const limiter = new SlidingWindowRateLimiter(handle.client, { logger: log, timeoutMs: 5000 });
          const id = `m${Math.random()}`;
          await limiter.check(id, LIMIT, WINDOW);
          assert.equal(limiter.backendState.mode, 'module');
          let restarted = false;
          const t = await underTraffic(limiter, id, async () => {
            await withModule.stop();
            restarted = true;
            await bare.start();
          }, () => restarted);
          ctx.diagnostic(`${t.calls} calls, ${t.degraded} degraded, ${t.allowed} allowed after the restart, `
      + `${t.allowed - await counted(limiter, id)} uncounted, outages ${limiter.circuit.outages} ${log.lines.slice(1).join('')}`);
          assertHealed(t, await counted(limiter, id), log, limiter, restartIsOutage(lib));
          assert.equal(limiter.backendState.mode, 'function');
          assert.equal(limiter.backendState.loads, 1);
        } finally {
          await handle.close();
          await withModule.cleanup();
          await bare.cleanup();
        }
      });
    }
  });
}
