/** The user's own clients, at their libraries' defaults. */
import IORedis, { Cluster as IOCluster } from 'ioredis';
import { createClient, createCluster } from 'redis';

export type Lib = 'ioredis' | 'node-redis';
export const LIBS: Lib[] = ['ioredis', 'node-redis'];

export interface Handle {
  client: object;
  close(): Promise<void>;
}

export async function connect(lib: Lib, port: number, options: { password?: string; username?: string } = {}): Promise<Handle> {
  if (lib === 'ioredis') {
    const client = new IORedis({ port, host: '127.0.0.1', ...options });
    client.on('error', () => undefined); // ioredis logs unhandled connection errors otherwise
    return { client, close: async () => { client.disconnect(); } };
  }
  const auth = options.password === undefined ? '' : `${options.username ?? 'default'}:${options.password}@`;
  const client = createClient({ url: `redis://${auth}127.0.0.1:${port}` });
  client.on('error', () => undefined);
  await client.connect();
  return { client, close: async () => { client.destroy(); } };
}

export async function connectCluster(lib: Lib, ports: number[]): Promise<Handle> {
  if (lib === 'ioredis') {
    const client = new IOCluster(ports.map((port) => ({ host: '127.0.0.1', port })));
    client.on('error', () => undefined);
    await new Promise<void>((ok, fail) => { client.once('ready', ok); client.once('error', fail); });
    return { client, close: async () => { client.disconnect(); } };
  }
  const client = createCluster({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
  client.on('error', () => undefined);
  await client.connect();
  return { client, close: async () => { client.destroy(); } };
}
