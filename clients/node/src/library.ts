/**
 * The Functions library (lua/slidingwindow.lua), shipped in the package from the repository's
 * one source: `librarySource()` is what FUNCTION LOAD takes, `LIBRARY_BODY` the same without
 * its `#!lua` line (what EVAL / EVALSHA take, on Redis 6.2), `LIBRARY_SHA` its sha1,
 * `LIBRARY_VERSION` the library's `slidingwindow_version`.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { adapterFor, type RedisClientLike } from './adapters';

/** Where the package keeps its copy of lua/slidingwindow.lua. */
export const LIBRARY_PATH = join(__dirname, '..', '..', 'lua', 'slidingwindow.lua');

const SOURCE = readFileSync(LIBRARY_PATH, 'utf8');

/** The library's source, for FUNCTION LOAD. */
export function librarySource(): string {
  return SOURCE;
}

/** The source without its first (`#!lua name=...`) line: the script EVAL / EVALSHA run. */
export const LIBRARY_BODY: string = SOURCE.slice(SOURCE.indexOf('\n') + 1);
/** The sha1 EVALSHA names the body by. */
export const LIBRARY_SHA: string = createHash('sha1').update(LIBRARY_BODY).digest('hex');
/** The bundled library's version (its `local VERSION = '...'`). */
export const LIBRARY_VERSION: string = (() => {
  const found = /^local VERSION = '([^']+)'$/m.exec(SOURCE);
  if (found === null) throw new Error(`${LIBRARY_PATH} has no \`local VERSION = '...'\` line`);
  return found[1]!;
})();

/** What an operator runs when the application's user may not load the library itself. */
export const LOAD_COMMAND = 'redis-cli FUNCTION LOAD REPLACE "$(cat lua/slidingwindow.lua)"';

/** '0.2.0' -> [0, 2, 0]; anything unreadable -> [] (sorts first: it is replaced). */
export function versionParts(version: unknown): number[] {
  const parts = String(version).split('.');
  return parts.every((p) => /^\d+$/.test(p)) ? parts.map(Number) : [];
}

/** Whether a loaded library's version is older than the bundled one (numerically, part by part). */
export function isOlder(version: unknown): boolean {
  const a = versionParts(version);
  const b = versionParts(LIBRARY_VERSION);
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]!;
  }
  return a.length < b.length;
}

/**
 * FUNCTION LOAD REPLACE the library on the server, or on every primary of a cluster (a
 * primary added later needs it too). Needs FUNCTION LOAD (the `@scripting` category);
 * the app's own user does not (README: the ACL lines). Resolves to the number of nodes
 * loaded. The limiter's `backend: 'auto'` does this itself where its user may.
 */
export async function loadLibrary(client: RedisClientLike): Promise<number> {
  const nodes = await adapterFor(client).primaries();
  await Promise.all(nodes.map((send) => send(['FUNCTION', 'LOAD', 'REPLACE', SOURCE])));
  return nodes.length;
}
