/**
 * One adapter per client library, chosen from the client you pass: ioredis (`Redis`,
 * `Cluster`), node-redis (`createClient`, `createCluster`), or a bare `sendCommand`
 * function. Each sends one command, routed by its key in a cluster.
 */

/** Sends one command (name first); `key` routes it in a cluster. */
export interface Sender {
  send(key: string, args: readonly string[], readonly: boolean): Promise<unknown>;
}

/**
 * Where the client is: `ready` (commands are written at once), `reconnecting` (its socket is
 * down and it waits out its own reconnect backoff; commands wait in its offline queue), or
 * `closed` (closed by its owner: commands are refused).
 */
export type ClientState = 'ready' | 'reconnecting' | 'closed';

/**
 * A connection of the limiter's own, opened with the client's options (address, TLS,
 * credentials, database) but no reconnects and no offline queue: it fails at once when the
 * server is not there. `connected` settles when it can take commands.
 */
export interface Spare extends Sender {
  readonly connected: Promise<void>;
  /** False once its connection is gone (it never reconnects). */
  alive(): boolean;
  /** Closes it after the replies still due (no throw). */
  close(): void;
  /** Closes it now, connecting or not (no throw). */
  destroy(): void;
}

export interface Adapter extends Sender {
  readonly kind: string;
  /** One sender per primary (single node: the client itself), for FUNCTION LOAD. */
  primaries(): Promise<Array<(args: readonly string[]) => Promise<unknown>>>;
  /** The client's state; absent (clusters, a bare sendCommand): always taken as ready. */
  state?(): ClientState;
  /** A new spare connection with the client's options, connecting (single-node ioredis and node-redis). */
  spare?(): Spare;
  /** Calls `fn` once when the client is ready or closed again; the returned function cancels it. */
  whenSettled?(fn: () => void): () => void;
}

/** A function that sends one command, e.g. `(...args) => client.sendCommand(args)` (one node). */
export type SendCommandFn = (...args: string[]) => Promise<unknown>;

/** What the limiter accepts as its client. */
export type RedisClientLike = object | SendCommandFn | Adapter;

/** The client's own events, for the end of a reconnect (both libraries emit 'ready' and 'end'). */
interface Emitter {
  once?(event: string, l: () => void): unknown;
  off?(event: string, l: () => void): unknown;
}

function settledBy(client: Emitter): ((fn: () => void) => () => void) | undefined {
  if (typeof client.once !== 'function' || typeof client.off !== 'function') return undefined;
  return (fn) => {
    const done = (): void => { cancel(); fn(); };
    const cancel = (): void => { client.off!('ready', done); client.off!('end', done); };
    client.once!('ready', done);
    client.once!('end', done);
    return cancel;
  };
}

interface IoRedisLike extends Emitter {
  call(command: string, ...args: string[]): Promise<unknown>;
  options?: { keyPrefix?: string };
  status?: string;
  duplicate?(override: object): IoRedisLike & {
    connect(): Promise<void>; quit(): Promise<unknown>; disconnect(): void; on(event: 'error', l: () => void): unknown;
  };
}
interface IoClusterLike {
  isCluster: true;
  options?: { keyPrefix?: string };
  sendCommand(command: unknown): unknown;
  nodes(role: 'master'): IoRedisLike[];
}
interface NodeRedisLike extends Emitter {
  sendCommand(args: string[]): Promise<unknown>;
  isOpen?: boolean;
  isReady?: boolean;
  options?: { socket?: object };
  duplicate?(overrides: object): NodeRedisLike & {
    connect(): Promise<unknown>; on(event: 'error', l: () => void): unknown;
    // node-redis 5: close/destroy; 4: quit/disconnect.
    close?(): Promise<unknown>; destroy?(): void; quit?(): Promise<unknown>; disconnect?(): Promise<unknown>;
  };
}
interface NodeClusterLike {
  masters: unknown[];
  sendCommand(firstKey: string, isReadonly: boolean, args: string[]): Promise<unknown>;
  nodeClient(node: unknown): Promise<NodeRedisLike> | NodeRedisLike;
}

// CRC16/XMODEM of the key's hash tag: its cluster slot (ioredis does not know the module's
// commands, so it would send them to a random node and follow MOVED on every call).
const CRC_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = (c & 0x8000) !== 0 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    table[i] = c;
  }
  return table;
})();

export function keySlot(key: string): number {
  let bytes = Buffer.from(key);
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC_TABLE[((crc >> 8) ^ b) & 0xff]!;
  return crc % 16384;
}

function has(obj: object, name: string): boolean {
  return typeof (obj as Record<string, unknown>)[name] === 'function';
}

/**
 * ioredis adds its `keyPrefix` only to the keys of the commands it knows (FCALL, DEL, ...),
 * never to SLIDINGWINDOW.*'s: the module's commands get it here, so the module and the
 * library name the same key, and DEL / PTTL find what CHECK wrote.
 */
function ioPrefixed(prefix: string | undefined, args: readonly string[]): readonly string[] {
  if (prefix === undefined || prefix === '' || args.length < 2 || !/^SLIDINGWINDOW\./i.test(args[0]!)) return args;
  return [args[0]!, prefix + args[1]!, ...args.slice(2)];
}

function ioCall(redis: IoRedisLike, args: readonly string[]): Promise<unknown> {
  // apply: the arguments as they are, without a copy of all but the name (ioredis copies them itself).
  return (redis.call as (...a: readonly string[]) => Promise<unknown>).apply(redis, ioPrefixed(redis.options?.keyPrefix, args) as string[]);
}

/** node-redis rejects the commands it had written when the socket closes. */
const SOCKET_CLOSED = /Socket closed unexpectedly|ECONNRESET/;

/**
 * A command node-redis rejected because the socket closed under it (a restart, a
 * failover) is sent once more while the client reconnects: it waits in the client's
 * offline queue and goes to the server that is back, as ioredis resends by itself. The
 * limiter's timeout still bounds the whole call, so a real outage opens the circuit
 * after at most `timeoutMs`. A command the old server had executed before its reply was
 * lost is counted again: with a restart without persistence that count is gone anyway.
 */
async function resentOnce(redis: NodeRedisLike, call: () => Promise<unknown>): Promise<unknown> {
  try {
    return await call();
  } catch (err) {
    const closed = err instanceof Error && (err.name === 'SocketClosedUnexpectedlyError' || SOCKET_CLOSED.test(err.message));
    if (!closed || redis.isOpen !== true) throw err;
    return call();
  }
}

function isAdapter(c: object): c is Adapter {
  return has(c, 'send') && has(c, 'primaries') && typeof (c as Adapter).kind === 'string';
}

let ioCommand: (new (name: string, args: string[], options: object) => { promise: Promise<unknown>; slot?: number }) | undefined;

function ioredisCommandClass(cluster: object): NonNullable<typeof ioCommand> {
  if (ioCommand === undefined) {
    const fromClass = (cluster.constructor as { Command?: unknown }).Command;
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    ioCommand = (fromClass ?? (require('ioredis') as { Command: unknown }).Command) as NonNullable<typeof ioCommand>;
  }
  return ioCommand;
}

/** The adapter for `client`. */
export function adapterFor(client: RedisClientLike): Adapter {
  if (typeof client === 'function') {
    const send = client as SendCommandFn;
    return {
      kind: 'sendCommand',
      send: (_key, args) => send(...args),
      primaries: async () => [(args) => send(...args)],
    };
  }
  if (isAdapter(client)) return client;
  if ((client as { isCluster?: unknown }).isCluster === true && has(client, 'sendCommand')) {
    const cluster = client as IoClusterLike;
    return {
      kind: 'ioredis-cluster',
      send(key, args) {
        const Command = ioredisCommandClass(cluster);
        // The cluster's keyPrefix, as its own commands get it (a Command built here has none).
        const prefix = cluster.options?.keyPrefix;
        const a = ioPrefixed(prefix, args);
        const command = new Command(a[0]!, a.slice(1), { replyEncoding: 'utf8', keyPrefix: prefix });
        command.slot = keySlot((prefix ?? '') + key); // routed like a key's command, MOVED still followed
        cluster.sendCommand(command);
        return command.promise;
      },
      primaries: async () => cluster.nodes('master').map((n) => (args) => n.call(args[0]!, ...args.slice(1))),
    };
  }
  if (has(client, 'call')) {
    const redis = client as IoRedisLike;
    return {
      kind: 'ioredis',
      send: (_key, args) => ioCall(redis, args),
      primaries: async () => [(args) => redis.call(args[0]!, ...args.slice(1))],
      ...(typeof redis.status === 'string' && typeof redis.duplicate === 'function' ? {
        // 'wait' (lazyConnect, not used yet): its first command connects it, as before.
        state: (): ClientState => (redis.status === 'ready' || redis.status === 'wait' ? 'ready'
          : redis.status === 'end' ? 'closed' : 'reconnecting'),
        spare(): Spare {
          const c = redis.duplicate!({
            lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false,
            maxRetriesPerRequest: 0, reconnectOnError: null, autoResubscribe: false,
          });
          c.on('error', () => undefined);
          return {
            connected: c.connect(),
            send: (_key, args) => ioCall(c, args),
            alive: () => c.status !== 'end' && c.status !== 'close',
            close: () => { c.quit().catch(() => c.disconnect()); },
            destroy: () => c.disconnect(),
          };
        },
        whenSettled: settledBy(redis),
      } : {}),
    };
  }
  if (Array.isArray((client as { masters?: unknown }).masters) && has(client, 'sendCommand')) {
    const cluster = client as NodeClusterLike;
    return {
      kind: 'node-redis-cluster',
      send: (key, args, readonly) => cluster.sendCommand(key, readonly, [...args]),
      primaries: async () => Promise.all(cluster.masters.map(async (m) => {
        const node = await cluster.nodeClient(m);
        return (args: readonly string[]) => node.sendCommand([...args]);
      })),
    };
  }
  if (has(client, 'sendCommand')) {
    const redis = client as NodeRedisLike;
    const send = (args: readonly string[]): Promise<unknown> => resentOnce(redis, () => redis.sendCommand([...args]));
    return {
      kind: 'node-redis',
      send: (_key, args) => send(args),
      primaries: async () => [send],
      ...(typeof redis.isReady === 'boolean' && typeof redis.duplicate === 'function' ? {
        state: (): ClientState => (redis.isOpen !== true ? 'closed' : redis.isReady === true ? 'ready' : 'reconnecting'),
        spare(): Spare {
          const c = redis.duplicate!({
            socket: { ...redis.options?.socket, reconnectStrategy: false },
            disableOfflineQueue: true, pingInterval: undefined, clientSideCache: undefined,
          });
          c.on('error', () => undefined);
          return {
            connected: c.connect().then(() => undefined),
            send: (_key, args) => c.sendCommand([...args]),
            alive: () => c.isOpen === true,
            close: () => { (c.close ?? c.quit)?.call(c).catch(() => undefined); },
            destroy: () => {
              try {
                if (c.destroy !== undefined) c.destroy(); else c.disconnect?.().catch(() => undefined);
              } catch { /* closed already */ }
            },
          };
        },
        whenSettled: settledBy(redis),
      } : {}),
    };
  }
  throw new TypeError('unsupported client: pass an ioredis Redis or Cluster, a node-redis client '
    + 'or cluster (connected), or a sendCommand function');
}
