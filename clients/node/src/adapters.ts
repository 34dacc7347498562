/**
 * One adapter per client library, chosen from the client you pass: ioredis (`Redis`,
 * `Cluster`), node-redis (`createClient`, `createCluster`), or a bare `sendCommand`
 * function. Each sends one command, routed by its key in a cluster.
 */

/** Sends one command (name first); `key` routes it in a cluster. */
export interface Adapter {
  readonly kind: string;
  send(key: string, args: readonly string[], readonly: boolean): Promise<unknown>;
  /** One sender per primary (single node: the client itself), for FUNCTION LOAD. */
  primaries(): Promise<Array<(args: readonly string[]) => Promise<unknown>>>;
}

/** A function that sends one command, e.g. `(...args) => client.sendCommand(args)` (one node). */
export type SendCommandFn = (...args: string[]) => Promise<unknown>;

/** What the limiter accepts as its client. */
export type RedisClientLike = object | SendCommandFn | Adapter;

interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
}
interface IoClusterLike {
  isCluster: true;
  sendCommand(command: unknown): unknown;
  nodes(role: 'master'): IoRedisLike[];
}
interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
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
        const command = new Command(args[0]!, args.slice(1), { replyEncoding: 'utf8' });
        command.slot = keySlot(key); // routed like a key's command, MOVED still followed
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
      send: (_key, args) => redis.call(args[0]!, ...args.slice(1)),
      primaries: async () => [(args) => redis.call(args[0]!, ...args.slice(1))],
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
    return {
      kind: 'node-redis',
      send: (_key, args) => redis.sendCommand([...args]),
      primaries: async () => [(args) => redis.sendCommand([...args])],
    };
  }
  throw new TypeError('unsupported client: pass an ioredis Redis or Cluster, a node-redis client '
    + 'or cluster (connected), or a sendCommand function');
}
