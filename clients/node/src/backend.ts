/**
 * Which server-side code answers a call: the module's commands or the Functions library
 * (the same state machine as the Python client's backend.py).
 *
 *   backend 'auto'    (the default) the module when the server has it, else the library
 *   backend 'module'  SLIDINGWINDOW.* only (an error where the module is not loaded)
 *   backend 'library' the library only (lua/slidingwindow.lua, shipped in this package)
 *
 * The library is called with FCALL / FCALL_RO (Redis 7.0+, Valkey 7.2+), or with EVALSHA
 * (EVAL once on NOSCRIPT) where the server has no FUNCTION (Redis 6.2).
 *
 * Detection runs in the first call that needs it and its answer is kept: after that a call
 * is one command. With 'auto' the first call is the module's command itself, so a server
 * with the module pays nothing. Looking for the library reads `slidingwindow_version` on
 * every primary, and loads the bundled library (FUNCTION LOAD REPLACE, every primary) where
 * it is missing or older; a newer one is kept. Only these errors make the limiter look
 * again, inside the same call, which is then sent again and goes through:
 * - with 'auto', the module's command is unknown (a failover or restart onto a server
 *   without it);
 * - `Function not found` (FUNCTION FLUSH; a failover or restart onto a node without it).
 * `NOSCRIPT` (SCRIPT FLUSH, restart) on the EVALSHA path is answered by sending the body
 * with EVAL. None of them is an outage: the limiter's circuit never sees them. Concurrent
 * calls that meet the same fault share one detection (one promise in flight).
 *
 * A user who may not load the library (NOPERM) gets `LibraryNotLoadedError`, naming the
 * operator's command.
 */
import type { Adapter, Sender } from './adapters';
import { LibraryNotLoadedError } from './errors';
import { LIBRARY_BODY, LIBRARY_SHA, LIBRARY_VERSION, LOAD_COMMAND, isOlder, librarySource } from './library';

export type Backend = 'auto' | 'module' | 'library';
export const BACKENDS: readonly Backend[] = ['auto', 'module', 'library'];

/** What a limiter sends, once decided. */
export type Mode =
  | 'module' // SLIDINGWINDOW.CHECK key ...
  | 'function' // FCALL slidingwindow_check 1 key ...
  | 'eval'; // EVALSHA <sha> 1 key slidingwindow_check ... (EVAL on NOSCRIPT)

export type Op = 'check' | 'peek' | 'refund' | 'counts';

const MODULE_COMMANDS: Record<Op, string> = {
  check: 'SLIDINGWINDOW.CHECK',
  peek: 'SLIDINGWINDOW.PEEK',
  refund: 'SLIDINGWINDOW.REFUND',
  counts: 'SLIDINGWINDOW.COUNTS',
};
/** The module's command -> [the library's function, read-only]. */
const FUNCTIONS: Record<Op, readonly [string, boolean]> = {
  check: ['slidingwindow_check', false],
  peek: ['slidingwindow_peek', true],
  refund: ['slidingwindow_refund', false],
  counts: ['slidingwindow_counts', true],
};

/** Sends one command to each primary (one node: the client itself). */
export type Primaries = () => Promise<Array<(args: readonly string[]) => Promise<unknown>>>;

function text(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).toLowerCase();
}

/** `ERR unknown command 'NAME'` (Redis 6.2 quotes it with backticks). */
function unknownCommand(err: unknown, name: string): boolean {
  const t = text(err);
  return t.includes(name.toLowerCase()) && (t.includes('unknown command') || t.includes("command doesn't exist"));
}

function functionMissing(err: unknown): boolean {
  return text(err).includes('function not found');
}

function noscript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

function noperm(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOPERM');
}

export function notLoadedMessage(cause: unknown): string {
  return `the slidingwindow module is not on this server and the slidingwindow library ${LIBRARY_VERSION} `
    + `is not loaded, and this user may not load it (${cause instanceof Error ? cause.message : String(cause)}). `
    + `An operator loads it once, on every primary: ${LOAD_COMMAND} (lua/slidingwindow.lua of the `
    + `repository, also shipped in the npm package), or loadLibrary(client) with a user allowed FUNCTION LOAD`;
}

/** The command that carries `op` on `key` in `mode`. */
export function wire(mode: Mode, op: Op, key: string, args: readonly string[]): string[] {
  if (mode === 'module') return [MODULE_COMMANDS[op], key, ...args];
  const [fn, readonly] = FUNCTIONS[op];
  if (mode === 'function') return [readonly ? 'FCALL_RO' : 'FCALL', fn, '1', key, ...args];
  return ['EVALSHA', LIBRARY_SHA, '1', key, fn, ...args];
}

function olderKeptMessage(versions: PromiseSettledResult<unknown>[], cause: unknown): string {
  const loaded = versions.map((v) => (v.status === 'fulfilled' ? String(v.value) : '?')).join(', ');
  return `rate limiter: the slidingwindow library on the server (${loaded}) is older than this client's `
    + `(${LIBRARY_VERSION}) and this user may not replace it (${cause instanceof Error ? cause.message : String(cause)}): `
    + `using it as it is. An operator loads the new one on every primary: ${LOAD_COMMAND}`;
}

/** The decision of one limiter: `choice` as given, `mode` once known. */
export class BackendState {
  readonly choice: Backend;
  /** undefined: to be found on the next call. 'auto' starts with the module (its first call is the call itself). */
  mode: Mode | undefined;
  /** Whether a call has been answered in `mode` (the limiter's `backend` says 'auto' before). */
  confirmed = false;
  /** Times the library was looked for (for tests and logs). */
  detections = 0;
  /** Times this limiter loaded the library (FUNCTION LOAD, on every primary). */
  loads = 0;
  /** Detections finished so far: a call that failed before the last one finished calls again without looking. */
  private generation = 0;
  private finding: Promise<Mode> | undefined;

  /** `warn` hears that an older library is used as it is (this user may not replace it). */
  constructor(choice: Backend = 'auto', private readonly warn: (message: string) => void = () => undefined) {
    if (!BACKENDS.includes(choice)) {
      throw new RangeError(`backend '${String(choice)}': use one of ${BACKENDS.map((b) => `'${b}'`).join(', ')}`);
    }
    this.choice = choice;
    this.mode = choice === 'library' ? undefined : 'module';
  }

  /**
   * One call of `op` on `key` through `sender`; resolves to its reply. `primaries` reaches
   * every primary (for the version check and the load).
   */
  call(sender: Sender, primaries: Primaries, op: Op, key: string, args: readonly string[]): Promise<unknown> {
    const mode = this.mode;
    if (mode === undefined) return this.attempts(sender, primaries, op, key, args, 1);
    // The mode is known (every call but the first and those after a fault): one command,
    // and what its failure needs is done by recover().
    const seen = this.generation;
    let sent: Promise<unknown>;
    try {
      sent = sender.send(key, wire(mode, op, key, args), FUNCTIONS[op][1] && mode !== 'eval');
    } catch (err) {
      sent = Promise.reject(err);
    }
    return sent.then(this.confirm, (err: unknown) => this.recover(err, mode, seen, sender, primaries, op, key, args));
  }

  private readonly confirm = (reply: unknown): unknown => {
    this.confirmed = true;
    return reply;
  };

  /** The first attempt's failure, in `mode`, sent after detection `seen`: as attempts() handles it. */
  private async recover(err: unknown, mode: Mode, seen: number, sender: Sender, primaries: Primaries, op: Op,
    key: string, args: readonly string[]): Promise<unknown> {
    if (mode === 'eval' && noscript(err)) return this.evalBody(sender, op, key, args);
    if (!this.gone(err, mode)) throw err;
    if (this.generation === seen) await this.find(primaries, seen);
    return this.attempts(sender, primaries, op, key, args, 2);
  }

  /** The calls from `first` on (the first: the mode to be found; the second: after a fault). */
  private async attempts(sender: Sender, primaries: Primaries, op: Op, key: string, args: readonly string[],
    first: number): Promise<unknown> {
    const readonly = FUNCTIONS[op][1];
    for (let attempt = first; ; attempt++) {
      const mode = this.mode ?? await this.find(primaries, this.generation);
      const seen = this.generation; // the detection this call is sent after
      try {
        const reply = await sender.send(key, wire(mode, op, key, args), readonly && mode !== 'eval');
        this.confirmed = true;
        return reply;
      } catch (err) {
        if (mode === 'eval' && noscript(err)) return this.evalBody(sender, op, key, args);
        if (attempt === 2 || !this.gone(err, mode)) throw err;
        // The module or the library is not there (any more): look again (unless another
        // call already did since this one was sent), then call again.
        if (this.generation === seen) await this.find(primaries, seen);
      }
    }
  }

  /** SCRIPT FLUSH or a restart: the body once, which also caches it for EVALSHA. */
  private async evalBody(sender: Sender, op: Op, key: string, args: readonly string[]): Promise<unknown> {
    const reply = await sender.send(key, ['EVAL', LIBRARY_BODY, '1', key, FUNCTIONS[op][0], ...args], false);
    this.confirmed = true;
    return reply;
  }

  private gone(err: unknown, mode: Mode): boolean {
    if (mode === 'module') return this.choice === 'auto' && unknownCommand(err, 'slidingwindow.');
    if (mode === 'function') return functionMissing(err) || unknownCommand(err, 'fcall');
    return false;
  }

  /** The one detection in flight, shared by every call that needs it. */
  private find(primaries: Primaries, seen: number): Promise<Mode> {
    if (this.finding !== undefined) return this.finding;
    if (this.generation !== seen && this.mode !== undefined) return Promise.resolve(this.mode); // found since
    this.mode = undefined;
    this.confirmed = false;
    const finding = this.findLibrary(primaries).finally(() => {
      if (this.finding === finding) this.finding = undefined;
    });
    this.finding = finding;
    return finding;
  }

  /**
   * Uses the loaded library, replaces an older one, loads a missing one, or falls back to
   * EVAL where the server has no FUNCTION. Resolves to the mode (and sets it).
   */
  private async findLibrary(primaries: Primaries): Promise<Mode> {
    this.detections += 1;
    const nodes = await primaries();
    const versions = await Promise.allSettled(nodes.map((send) => send(['FCALL_RO', 'slidingwindow_version', '0'])));
    const failures = versions.flatMap((v) => (v.status === 'rejected' ? [v.reason as unknown] : []));
    if (failures.some((err) => unknownCommand(err, 'fcall_ro'))) return this.decided('eval'); // Redis 6.2: no FUNCTION
    const other = failures.find((err) => !functionMissing(err));
    if (other !== undefined) throw other;
    const stale = failures.length > 0
      || versions.some((v) => v.status === 'fulfilled' && isOlder(v.value));
    if (stale) {
      const code = librarySource();
      const loaded = await Promise.allSettled(nodes.map((send) => send(['FUNCTION', 'LOAD', 'REPLACE', code])));
      const refused = loaded.flatMap((v) => (v.status === 'rejected' ? [v.reason as unknown] : []));
      const denied = refused.find(noperm);
      if (denied !== undefined) {
        // Every primary has a library, only older: it answers every call this client
        // sends, so it is used as it is rather than stopping the app mid-upgrade.
        if (failures.length > 0) throw new LibraryNotLoadedError(notLoadedMessage(denied), { cause: denied });
        this.warn(olderKeptMessage(versions, denied));
        return this.decided('function');
      }
      // FUNCTION refused by name (renamed away): EVAL still works.
      if (refused.some((err) => unknownCommand(err, 'function'))) return this.decided('eval');
      if (refused.length > 0) throw refused[0];
      this.loads += 1;
    }
    return this.decided('function');
  }

  private decided(mode: Mode): Mode {
    this.mode = mode;
    this.generation += 1;
    return mode;
  }
}

/** The adapter's primaries, or `sender` alone when it is a spare connection of a single node. */
export function primariesOf(adapter: Adapter, sender: Sender, key: string): Primaries {
  if (sender === adapter) return () => adapter.primaries();
  return async () => [(args) => sender.send(key, args, false)];
}
