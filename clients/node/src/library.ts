/** The Functions library (lua/slidingwindow.lua), shipped in the package from the repository's one source. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { adapterFor, type RedisClientLike } from './adapters';

/** Where the package keeps its copy of lua/slidingwindow.lua. */
export const LIBRARY_PATH = join(__dirname, '..', '..', 'lua', 'slidingwindow.lua');

let source: string | undefined;

/** The library's source, for FUNCTION LOAD. */
export function librarySource(): string {
  source ??= readFileSync(LIBRARY_PATH, 'utf8');
  return source;
}

/**
 * FUNCTION LOAD REPLACE the library on the server, or on every primary of a cluster (a
 * primary added later needs it too). Needs the `@scripting` ACL category; the app's own
 * user then only needs FCALL / FCALL_RO. Resolves to the number of nodes loaded.
 */
export async function loadLibrary(client: RedisClientLike): Promise<number> {
  const nodes = await adapterFor(client).primaries();
  const body = librarySource();
  await Promise.all(nodes.map((send) => send(['FUNCTION', 'LOAD', 'REPLACE', body])));
  return nodes.length;
}
