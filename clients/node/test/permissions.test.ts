/**
 * ACL, on real servers without the module: the README's least-privilege line runs every call
 * through the Functions library, and a call refused by ACL throws MissingPermissionError
 * naming the missing commands and the line to fix, with no outage. Redis 6.2: the errors of
 * EVALSHA refused inside the script and of EVALSHA itself, through the same hook.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  LIBRARY_COMMANDS, LIBRARY_COMMANDS_62, LIBRARY_LINE, LIBRARY_LINE_62, MissingPermissionError, OPERATOR_LINE,
  SlidingWindowRateLimiter, adapterFor, librarySource,
} from '../src';
import { asPermissionError, refusal } from '../src/permissions';
import { LIBS, connect, type Handle } from './helpers/clients';
import {
  ALL_KINDS, REPO, kinds, rawCommand, startLibraryKind, startLibraryServer, startServer, type Server,
} from './helpers/servers';

function readmeLines(relative: string): string[] {
  const text = readFileSync(join(REPO, relative), 'utf8');
  const block = /<!-- library-acl-lines.*?-->([\s\S]*?)<!-- \/library-acl-lines -->/.exec(text);
  assert.ok(block !== null, `${relative}: no library-acl-lines markers`);
  return block[1]!.split('\n').filter((l) => l.startsWith('ACL SETUSER '));
}

test('the lines the errors quote are the READMEs\' (which tests/lua_acl.rs runs)', () => {
  const lines = [LIBRARY_LINE, LIBRARY_LINE_62, OPERATOR_LINE];
  assert.deepEqual(readmeLines('README.md'), lines);
  assert.deepEqual(readmeLines('lua/README.md'), lines);
  const entry = new Set(['fcall', 'fcall_ro', 'evalsha', 'eval']);
  for (const [line, commands] of [[LIBRARY_LINE, LIBRARY_COMMANDS], [LIBRARY_LINE_62, LIBRARY_COMMANDS_62]] as const) {
    const granted = line.split(' ').filter((w) => w.startsWith('+')).map((w) => w.slice(1));
    assert.deepEqual(granted.filter((c) => !entry.has(c)), commands);
  }
});

/** `line` (an ACL SETUSER line) for `user` (reset first), without the rules in `drop`; returns [user, password]. */
async function setUser(port: number, line: string, user?: string, drop: string[] = []): Promise<[string, string]> {
  const words = line.split(' ');
  if (user !== undefined) words.splice(2, 1, user, 'reset');
  const kept = words.filter((w) => !drop.includes(w));
  const reply = await rawCommand(port, kept.join(' '));
  assert.ok(reply.startsWith('+OK'), `${kept.join(' ')}: ${reply}`);
  return [kept[2]!, words.find((w) => w.startsWith('>'))!.slice(1)];
}

/**
 * ACL LOG's refused objects for `user`, without what the client library sends on connecting
 * and does without: CLIENT SETINFO (node-redis), INFO (ioredis's ready check, which it skips).
 */
async function refused(admin: Handle, user: string): Promise<string[]> {
  const log = await adapterFor(admin.client).send('', ['ACL', 'LOG'], true) as unknown[][];
  return log.map((entry) => {
    const fields = new Map<string, string>();
    for (let i = 0; i + 1 < entry.length; i += 2) fields.set(String(entry[i]), String(entry[i + 1]));
    return fields;
  }).filter((f) => f.get('username') === user && !/^(client(\|setinfo)?|info)$/.test(f.get('object') ?? ''))
    .map((f) => f.get('object')!);
}

async function rejects(call: Promise<unknown>): Promise<MissingPermissionError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof MissingPermissionError, `not a MissingPermissionError: ${String(err)}`);
    return err;
  }
  assert.fail('the call went through');
}

for (const { name: kind, skip } of kinds(ALL_KINDS)) {
  for (const lib of LIBS) {
    describe(`${kind}-managed (${lib}): the library's ACL`, { skip }, () => {
      let server: Server;
      let admin: Handle;
      const opened: Handle[] = [];
      const as = async (user: string, password: string): Promise<Handle> => {
        const h = await connect(lib, server.port, { username: user, password });
        opened.push(h);
        return h;
      };
      before(async () => {
        server = await startLibraryServer(kind);
        admin = await connect(lib, server.port);
      });
      after(async () => {
        for (const h of opened) await h.close();
        await admin?.close();
        await server?.cleanup();
      });

      test('the application line runs check, peek, refund, counts, several limits, ms, cost', async () => {
        const [user, password] = await setUser(server.port, LIBRARY_LINE);
        const errors: Error[] = [];
        const l = new SlidingWindowRateLimiter((await as(user, password)).client, { onError: (e) => errors.push(e) });
        assert.equal((await l.check('clock', 3, 60)).count, 1); // the server's clock: TIME
        assert.equal(l.backend, 'library');
        assert.equal((await l.check('a', 3, 60, { now: 1000 })).count, 1);
        assert.equal((await l.check('a', 3, 60, { now: 1000, cost: 2 })).count, 3);
        const denied = await l.check('a', 3, 60, { now: 1001 });
        assert.ok(!denied.allowed && denied.retryAfter > 0);
        assert.equal((await l.refund('a', 3, 60, { now: 1001, cost: 2 })).allowed, true);
        assert.equal((await l.peek('a', 3, 60, { now: 1001 })).count, 2);
        assert.deepEqual(await l.counts('a', 60, { now: 1001 }), { previous: 0, current: 1, elapsed: 41, degraded: false });
        assert.ok((await l.check('ms', 2, 1000, { ms: true })).allowed);
        const several = await l.checkLimits('multi', [[5, 60], [20, 3600], [50, 86400]], { now: 2000 });
        assert.deepEqual(several.limits.map((r) => r.count), [1, 1, 1]);
        // One of them alone: the others are kept, with the key's expiry read back.
        assert.equal((await l.check('multi', 5, 60, { now: 2001 })).count, 2);
        assert.ok((await l.refundLimits('multi', [[5, 60], [20, 3600]], { now: 2002 })).allowed);
        assert.deepEqual(errors, []);
        assert.deepEqual(await refused(admin, user), []);
      });

      test('only the functions: every call names every missing command', async () => {
        const [user, password] = await setUser(server.port, LIBRARY_LINE, 'bare', LIBRARY_COMMANDS.map((c) => `+${c}`));
        const errors: Error[] = [];
        const l = new SlidingWindowRateLimiter((await as(user, password)).client, { onError: (e) => errors.push(e) });
        for (const call of [() => l.check('b', 5, 60), () => l.peek('b', 5, 60), () => l.counts('b', 60),
          () => l.checkLimits('b', [[5, 60], [10, 3600]]), () => l.refund('b', 5, 60)]) {
          const e = await rejects(call());
          assert.deepEqual(e.commands, LIBRARY_COMMANDS);
          assert.ok(e.message.includes(`+${LIBRARY_COMMANDS.join(' +')}`) && e.message.includes(LIBRARY_LINE), e.message);
          if (kind !== 'redis7') assert.ok(e.message.includes('ACL SETUSER bare +time'), e.message); // 7.2+ names the user
        }
        assert.deepEqual(errors, []);
        assert.equal(l.circuit.down, false);
      });

      test('one command missing: that one; the call itself or its key refused', async () => {
        const [user, password] = await setUser(server.port, LIBRARY_LINE, 'notime', ['+time']);
        const l = new SlidingWindowRateLimiter((await as(user, password)).client);
        assert.deepEqual((await rejects(l.check('t', 5, 60))).commands, ['time']);
        assert.ok((await l.peek('t', 5, 60, { now: 100 })).allowed); // a read on the caller's now: no TIME
        const [u2, p2] = await setUser(server.port, LIBRARY_LINE, 'nofcall', ['+fcall']);
        const nofcall = new SlidingWindowRateLimiter((await as(u2, p2)).client);
        const e = await rejects(nofcall.check('f', 5, 60));
        assert.deepEqual(e.commands, ['fcall']);
        assert.ok(e.message.includes('+fcall'), e.message);
        const [u3, p3] = await setUser(server.port, LIBRARY_LINE);
        const other = new SlidingWindowRateLimiter((await as(u3, p3)).client, { prefix: 'x:' });
        const k = await rejects(other.check('k', 5, 60));
        assert.deepEqual(k.commands, []);
        assert.ok(k.message.includes('~<prefix>*'), k.message);
      });
    });
  }
}

describe('redis62: the errors of the EVALSHA path', { skip: kinds(['redis62'])[0]?.skip ?? 'redis62 not asked for' }, () => {
  let server: Server;
  const opened: Handle[] = [];
  before(async () => {
    server = await startLibraryKind('redis62');
  });
  after(async () => {
    for (const h of opened) await h.close();
    await server?.cleanup();
  });
  const body = librarySource().split('\n').slice(1).join('\n');

  for (const lib of LIBS) {
    test(`${lib}: a command refused inside the script, EVALSHA refused, through the hook`, async () => {
      const [user, password] = await setUser(server.port, LIBRARY_LINE_62, `bare-${lib}`,
        LIBRARY_COMMANDS_62.map((c) => `+${c}`));
      const h = await connect(lib, server.port, { username: user, password });
      opened.push(h);
      const send = (args: readonly string[]): Promise<unknown> => adapterFor(h.client).send('rate:b', args, false);
      let raw: unknown;
      try {
        await send(['EVAL', body, '1', 'rate:b', 'slidingwindow_check', '5', '60']);
      } catch (err) {
        raw = err;
      }
      assert.match(String((raw as Error).message), /^ERR Error running script \(call to f_[0-9a-f]+\): .*The user executing the script can't run this command or subcommand$/);
      assert.equal(refusal(raw), 'script');
      const e = await asPermissionError(raw, 'rate:b', send) as MissingPermissionError;
      assert.ok(e instanceof MissingPermissionError);
      assert.deepEqual(e.commands, LIBRARY_COMMANDS_62); // 6.2 cannot tell which
      assert.ok(e.message.includes('Redis 6.2 cannot say') && e.message.includes(LIBRARY_LINE_62), e.message);
      // GET refused (a read on the caller's now), returned by the script's pcall: no ERR code.
      try {
        await send(['EVAL', body, '1', 'rate:b', 'slidingwindow_peek', '5', '60', '100']);
        assert.fail('went through');
      } catch (err) {
        assert.match((err as Error).message, /^@user_script: \d+: The user executing the script can't run/);
        assert.deepEqual((await asPermissionError(err, 'rate:b', send) as MissingPermissionError).commands, LIBRARY_COMMANDS_62);
      }
      // EVALSHA itself refused.
      const [u2, p2] = await setUser(server.port, LIBRARY_LINE_62, `noevalsha-${lib}`, ['+evalsha']);
      const h2 = await connect(lib, server.port, { username: u2, password: p2 });
      opened.push(h2);
      try {
        await adapterFor(h2.client).send('rate:c', ['EVALSHA', '0'.repeat(40), '1', 'rate:c'], false);
        assert.fail('went through');
      } catch (err) {
        assert.equal((err as Error).message, "NOPERM this user has no permissions to run the 'evalsha' command or its subcommand");
        const e2 = await asPermissionError(err, 'rate:c', send) as MissingPermissionError;
        assert.deepEqual(e2.commands, ['evalsha']);
      }
    });

    test(`${lib}: the limiter on the EVALSHA path: the line works, a bare user names the whole list`, async () => {
      const [user, password] = await setUser(server.port, LIBRARY_LINE_62, `bare2-${lib}`,
        LIBRARY_COMMANDS_62.map((c) => `+${c}`));
      const h = await connect(lib, server.port, { username: user, password });
      opened.push(h);
      const [u3, p3] = await setUser(server.port, LIBRARY_LINE_62, `app-${lib}`);
      const app = await connect(lib, server.port, { username: u3, password: p3 });
      opened.push(app);
      const l = new SlidingWindowRateLimiter(app.client, { prefix: `rate:${lib}:` }); // keys of its own per client library
      assert.ok((await l.check('x', 5, 60)).allowed);
      assert.equal(l.backendState.mode, 'eval');
      assert.equal((await l.check('x6', 3, 60, { now: 1000, cost: 2 })).count, 2);
      assert.equal((await l.peek('x6', 3, 60, { now: 1000 })).count, 3);
      assert.ok((await l.refund('x6', 3, 60, { now: 1000 })).allowed);
      assert.equal((await l.counts('x6', 60, { now: 1000 })).current, 1);
      assert.deepEqual((await l.checkLimits('m6', [[5, 60], [20, 3600]], { now: 2000 })).limits.map((r) => r.count), [1, 1]);
      assert.equal((await l.check('m6', 5, 60, { now: 2001 })).count, 2); // the hour kept: PTTL
      assert.ok((await l.check('ms6', 2, 1000, { ms: true })).allowed);
      const bareLimiter = new SlidingWindowRateLimiter(h.client);
      assert.deepEqual((await rejects(bareLimiter.check('y', 5, 60))).commands, LIBRARY_COMMANDS_62);
      // One command missing: 6.2 cannot tell which, the whole list again.
      const [u4, p4] = await setUser(server.port, LIBRARY_LINE_62, `notime-${lib}`, ['+time']);
      const notime = await connect(lib, server.port, { username: u4, password: p4 });
      opened.push(notime);
      const e = await rejects(new SlidingWindowRateLimiter(notime.client).check('z', 5, 60));
      assert.deepEqual(e.commands, LIBRARY_COMMANDS_62);
      assert.ok(e.message.includes(LIBRARY_LINE_62), e.message);
    });
  }
});

describe('redis7 with the module: the module command refused', { skip: kinds(['redis7'])[0]?.skip ?? 'redis7 not asked for' }, () => {
  for (const lib of LIBS) {
    test(`${lib}: the library's line on a server with the module names the module command`, async () => {
      const server = await startServer('redis7');
      const h = await (async () => {
        const [user, password] = await setUser(server.port, LIBRARY_LINE);
        return connect(lib, server.port, { username: user, password });
      })();
      try {
        const e = await rejects(new SlidingWindowRateLimiter(h.client).check('m', 5, 60));
        assert.deepEqual(e.commands, ['slidingwindow.check']);
        assert.ok(e.message.includes("ACL SETUSER <user> +slidingwindow.check") && e.message.includes("module's lines"), e.message);
      } finally {
        await h.close();
        await server.cleanup();
      }
    });
  }
});
