/**
 * `npm pack` gives a package that installs into an empty project and works there: the
 * tarball (of the build `npm test` just made) and express, express-rate-limit and ioredis
 * installed with npm (local cache first, the registry otherwise) into a temporary project,
 * whose Express app limits against a real server started here.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { BASE_KINDS, kinds, startServer, startLibraryServer, type Server } from './helpers/servers';

const run = promisify(execFile);
const PKG = resolve(__dirname, '..', '..');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

const APP = `
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const Redis = require('ioredis');
const { SlidingWindowStore, SlidingWindowRateLimiter, loadLibrary } = require('redis-slidingwindow');
(async () => {
  const redis = new Redis({ port: Number(process.env.REDIS_PORT), host: '127.0.0.1' });
  if (process.env.LOAD_LIBRARY === '1') await loadLibrary(redis);
  const limiter = new SlidingWindowRateLimiter(redis, { prefix: 'pack:' });
  const app = express();
  app.use(rateLimit({ windowMs: 60000, limit: 3, standardHeaders: 'draft-8', store: new SlidingWindowStore({ limiter }) }));
  app.get('/', (_req, res) => { res.send(limiter.backend); });
  const server = app.listen(0, '127.0.0.1', () => console.log('PORT ' + server.address().port));
})();
`;

async function serve(dir: string, redisPort: number, loadLibrary: boolean): Promise<{ url: string; stop: () => void }> {
  const child = spawn(process.execPath, ['app.js'], {
    cwd: dir, env: { ...process.env, REDIS_PORT: String(redisPort), LOAD_LIBRARY: loadLibrary ? '1' : '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`app did not start: ${out}`)), 15000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /PORT (\d+)/.exec(out);
      if (m !== null) { clearTimeout(timer); ok(Number(m[1])); }
    });
    child.once('exit', (code) => { clearTimeout(timer); fail(new Error(`app exited ${code}: ${out}`)); });
  });
  return { url: `http://127.0.0.1:${port}/`, stop: () => { child.kill(); } };
}

const [first] = kinds(BASE_KINDS);

describe('npm pack: the tarball installs into an empty project and works there', { skip: first?.skip ?? 'no server kind', timeout: 240000 }, () => {
  let dir: string;
  let tarball: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sw-node-pack-'));
    // npm test built build/ and lua/ just before (pretest): pack them as they are.
    const { stdout } = await run(NPM, ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: PKG, timeout: 60000 });
    const [info] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
    assert.ok(info !== undefined);
    const paths = info.files.map((f) => f.path);
    assert.ok(paths.includes('lua/slidingwindow.lua'), 'the Functions library is in the package');
    assert.ok(paths.includes('build/src/index.js') && paths.includes('build/src/index.d.ts'));
    assert.ok(!paths.some((p) => p.startsWith('build/test/') || p.startsWith('src/')), `only the build: ${paths.join(' ')}`);
    tarball = join(dir, info.filename);
    const project = join(dir, 'app');
    rmSync(project, { recursive: true, force: true });
    await run('mkdir', ['-p', project]);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'sw-pack-check', version: '1.0.0', private: true }));
    writeFileSync(join(project, 'app.js'), APP);
    await run(NPM, ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel', 'error',
      tarball, 'express@5', 'express-rate-limit@8', 'ioredis@5'], { cwd: project, timeout: 180000 });
    dir = project;
  });
  after(() => { rmSync(resolve(dir, '..'), { recursive: true, force: true }); });

  test('the package is installed with its files, and no runtime dependencies', () => {
    const installed = readdirSync(join(dir, 'node_modules', 'redis-slidingwindow'));
    assert.ok(installed.includes('lua') && installed.includes('build') && installed.includes('README.md'), installed.join(' '));
  });

  for (const backend of ['module', 'library'] as const) {
    test(`an Express app with the store: 200 then 429 at the limit (${backend})`, async () => {
      const server: Server = backend === 'module' ? await startServer(first!.name) : await startLibraryServer(first!.name);
      // the library server is loaded again by the app, with the package's own copy (loadLibrary)
      const app = await serve(dir, server.port, backend === 'library');
      try {
        const codes: number[] = [];
        let body = '';
        for (let i = 0; i < 4; i++) {
          const r = await fetch(app.url);
          codes.push(r.status);
          if (i === 0) body = await r.text();
        }
        assert.deepEqual(codes, [200, 200, 200, 429]);
        assert.equal(body, backend);
      } finally {
        app.stop();
        await server.cleanup();
      }
    });
  }
});
