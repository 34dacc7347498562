/**
 * The README's Node install lines and its Express app, run as a new user runs them: the
 * lines between `<!-- node-install:begin -->` and `<!-- node-install:end -->` of README.md
 * (the same block is in clients/node/README.md), verbatim but for the clone's path on the
 * `REPO=` line, in an empty project, against a copy of the repository as a fresh clone has
 * it (no node_modules, no build); npm takes packages from its cache when it has them (prefer-offline), else
 * from the registry. Then the app between `node-express:begin` and `node-express:end`,
 * with limit 5, its Redis port and a free HTTP port, against a real server with the module:
 * 5 x 200 then 429 over HTTP; Redis stopped: the app keeps serving (fail-open) with the
 * headers README.md states, and no unhandled 'error' event; Redis started again: 429s again.
 * pack.test.ts checks the tarball of the current build (its files, the library backend).
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { BASE_KINDS, REPO, kinds, startServer } from './helpers/servers';

const run = promisify(execFile);

/** The code of the fenced block between `<!-- name:begin ... -->` and `<!-- name:end -->` in `file`. */
export function readmeBlock(file: string, name: string): string {
  const text = readFileSync(file, 'utf8');
  const m = new RegExp(`<!-- ${name}:begin[^>]*-->\\s*\`\`\`\\w*\\n([\\s\\S]*?)\`\`\`\\s*<!-- ${name}:end -->`).exec(text);
  assert.ok(m !== null, `${file}: no ${name}:begin / ${name}:end block`);
  return m[1]!;
}

/** `text` with `pattern` replaced; it must match exactly once (else the README changed). */
function replaceOnce(text: string, pattern: RegExp, by: string, what: string): string {
  const n = (text.match(new RegExp(pattern.source, `${pattern.flags.replace('g', '')}g`)) ?? []).length;
  assert.equal(n, 1, `the README's block should have exactly one ${what} (${pattern}), has ${n}:\n${text}`);
  return text.replace(pattern, by);
}

const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** The environment of a user's shell: none of the npm_* variables `npm test` set for us. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  return { ...env, ...extra };
}

/** What a fresh clone has of what `make node-package` reads: no node_modules, no build, no copied lua/. */
function copyAsCloned(dest: string): void {
  const ignored = new Set(['node_modules', 'build', join('clients', 'node', 'lua')]);
  for (const part of ['Makefile', 'lua', join('clients', 'node')]) {
    cpSync(join(REPO, part), join(dest, part), {
      recursive: true,
      filter: (src) => {
        const rel = relative(REPO, src);
        return !rel.split(sep).some((p) => p === 'node_modules' || p === 'build') && !ignored.has(rel) && !rel.endsWith('.tgz');
      },
    });
  }
}

interface Reply { status: number; headers: Record<string, string | string[] | undefined> }

/** GET `url` from the loopback address `from` (another address is another client to express-rate-limit). */
function get(url: string, from = '127.0.0.1'): Promise<Reply> {
  return new Promise((ok, fail) => {
    const req = request(url, { localAddress: from, agent: false }, (res) => {
      res.resume();
      res.on('end', () => ok({ status: res.statusCode ?? 0, headers: res.headers }));
    });
    req.on('error', fail);
    req.end();
  });
}

interface App { child: ChildProcess; url: string; output: () => string }

async function startApp(dir: string, redisPort: number): Promise<App> {
  const child = spawn(process.execPath, ['app.mjs'], {
    cwd: dir, env: userEnv({ REDIS_PORT: String(redisPort) }), stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
  child.stderr!.on('data', (d: Buffer) => { out += d.toString(); });
  const port = await new Promise<number>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`app did not start: ${out}`)), 15000);
    const look = (): void => {
      const m = /PORT (\d+)/.exec(out);
      if (m !== null) { clearTimeout(timer); ok(Number(m[1])); }
    };
    child.stdout!.on('data', look);
    child.once('exit', (code) => { clearTimeout(timer); fail(new Error(`app exited ${code}: ${out}`)); });
  });
  return { child, url: `http://127.0.0.1:${port}/`, output: () => out };
}

async function stopApp(app: App | undefined): Promise<void> {
  if (app === undefined || app.child.exitCode !== null || app.child.signalCode !== null) return;
  const exited = new Promise((ok) => app.child.once('exit', ok));
  app.child.kill('SIGTERM');
  await exited;
}

const [first] = kinds(BASE_KINDS);
const NODE_README = join(REPO, 'clients', 'node', 'README.md');
const README = join(REPO, 'README.md');

describe('README: the Node install lines and the Express app work in an empty project', { skip: first?.skip ?? 'no server kind', timeout: 300000 }, () => {
  let tmp: string;
  let project: string;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sw-node-install-'));
    const clone = join(tmp, 'redis-slidingwindow');
    copyAsCloned(clone);
    project = join(tmp, 'app');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'sw-install-check', version: '1.0.0', private: true }));
    const lines = readmeBlock(README, 'node-install');
    assert.equal(readmeBlock(NODE_README, 'node-install'), lines, 'clients/node/README.md has the same install lines as README.md');
    const script = replaceOnce(lines, /^REPO=\S+/m, `REPO=${quote(clone)}`, 'REPO= line');
    // The lines as written; the cache first (it is a test, not a user), nothing else changed.
    await run('bash', ['-e', '-c', script], {
      cwd: project, timeout: 240000, maxBuffer: 1 << 26,
      env: userEnv({ npm_config_prefer_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false' }),
    });
  });
  after(() => { if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true }); });

  test('the package is installed built, with the Functions library, as a copy (no link to the clone)', (t) => {
    const pkg = join(project, 'node_modules', 'redis-slidingwindow');
    assert.ok(existsSync(join(pkg, 'build', 'src', 'index.js')), 'build/src/index.js');
    assert.ok(existsSync(join(pkg, 'lua', 'slidingwindow.lua')), 'lua/slidingwindow.lua');
    const deps = (JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }).dependencies;
    assert.match(deps['redis-slidingwindow'] ?? '', /\.tgz$/);
    for (const name of ['ioredis', 'express', 'express-rate-limit']) assert.ok(name in deps, `${name} installed`);
    const version = (name: string): string =>
      (JSON.parse(readFileSync(join(project, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
    t.diagnostic(['ioredis', 'express', 'express-rate-limit'].map((n) => `${n} ${version(n)}`).join(', '));
  });

  test('the Express app, limit 5: 200 x 5 then 429; Redis stopped: served, headers as README.md says; Redis back: 429 again', async (t) => {
    let code = readmeBlock(README, 'node-express');
    code = replaceOnce(code, /new Redis\(\)/, 'new Redis(Number(process.env.REDIS_PORT))', '`new Redis()`');
    code = replaceOnce(code, /limit: 100\b/, 'limit: 5', '`limit: 100`');
    code = replaceOnce(code, /app\.listen\(3000[^\n]*/,
      "const server = app.listen(0, '127.0.0.1', () => console.log('PORT ' + server.address().port));", '`app.listen(3000...)`');
    writeFileSync(join(project, 'app.mjs'), code);
    const server = await startServer(first!.name);
    let app: App | undefined;
    try {
      app = await startApp(project, server.port);
      const codes: number[] = [];
      let refused: Reply | undefined;
      for (let i = 0; i < 6; i++) {
        refused = await get(app.url);
        codes.push(refused.status);
      }
      assert.deepEqual(codes, [200, 200, 200, 200, 200, 429]);
      assert.match(String(refused!.headers['retry-after']), /^\d+$/);
      assert.match(String(refused!.headers.ratelimit), /^"5-in-1min"; r=0; t=\d+$/);

      // Redis stopped. The refused client is still refused (its refusal is in the store's deny
      // cache, which is exact) until another client's request finds the outage (after the
      // limiter's 500 ms timeout); from then on every request is served, with the placeholder
      // headers README.md states.
      await server.stop();
      assert.equal((await get(app.url)).status, 429);
      const during = [await get(app.url, '127.0.0.2'), await get(app.url), await get(app.url), await get(app.url, '127.0.0.3')];
      assert.deepEqual(during.map((r) => r.status), [200, 200, 200, 200], app.output());
      for (const r of during) {
        assert.equal(r.headers.ratelimit, '"5-in-1min"; r=4; t=60');
        assert.equal(r.headers['retry-after'], undefined);
      }
      assert.equal(app.child.exitCode, null, `the app is still running: ${app.output()}`);
      const readme = readFileSync(README, 'utf8');
      assert.ok(readme.includes('`RateLimit: "100-in-1min"; r=99; t=60`'), 'README.md states the fail-open header (for its limit of 100)');

      // Redis started again on its port (empty: no persistence): limiting resumes, up to 5 again then 429.
      await server.start();
      const deadline = Date.now() + 15000;
      const back: number[] = [];
      while (!back.includes(429) && Date.now() < deadline) {
        back.push((await get(app.url)).status);
        await sleep(50);
      }
      assert.ok(back.includes(429), `limiting back after the restart: ${back.join(' ')}\n${app.output()}`);
      assert.equal(app.child.exitCode, null, `the app is still running: ${app.output()}`);
      const out = app.output();
      assert.doesNotMatch(out, /Unhandled error event|Unhandled 'error' event|ERR_ERL_/, out);
      assert.match(out, /^redis: /m, `the snippet's 'error' listener saw the outage: ${out}`);
      t.diagnostic(out.trim().split('\n').slice(0, 6).join(' | '));
    } finally {
      await stopApp(app);
      await server.cleanup();
    }
  });
});
