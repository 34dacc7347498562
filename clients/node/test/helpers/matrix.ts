/**
 * The store tests' matrix: every server kind x backend (module; library without the module)
 * x client library (ioredis, node-redis) x topology (one node; a 3-master cluster). One
 * server, or one cluster, per kind and backend, shared by both client libraries' tests.
 * SW_NODE_CLUSTER_KINDS=redis7,valkey9 narrows the cluster part alone.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { loadLibrary } from '../../src';
import { LIBS, connect, connectCluster, type Handle, type Lib } from './clients';
import {
  ALL_KINDS, kinds, rawCommand, startCluster, startLibraryServer, startServer, type Cluster, type KindName, type Server,
} from './servers';

export type Backend = 'module' | 'library';

/**
 * The stores' limiter timeout in these tests (default 500 ms): a loaded machine that leaves
 * a reply for longer would open the circuit (fail-open: every request allowed), which
 * outage.test.ts tests; here it would only make a limit test prove nothing.
 */
export const TIMEOUT_MS = 5000;
export const BACKENDS: Backend[] = ['module', 'library'];

/** A cell of the matrix, known when the tests are registered (for a test's skip). */
export interface Cell {
  kind: KindName;
  backend: Backend;
  lib: Lib;
  topology: 'node' | 'cluster';
}

/** What a scenario runs against (read it inside a test: it is set in `before`). */
export interface Target {
  kind: KindName;
  backend: Backend;
  lib: Lib;
  /** The user's client: a single-node client or a cluster client. */
  client: object;
  /** The cluster, when the client is one. */
  cluster: Cluster | undefined;
  /** Ports of the nodes holding data (the one server, or the cluster's masters). */
  ports: number[];
}

/** Keys per node (DBSIZE of each), to show a cluster's keys landed on several masters. */
export async function keysPerNode(ports: number[]): Promise<number[]> {
  const sizes = await Promise.all(ports.map((p) => rawCommand(p, 'DBSIZE')));
  return sizes.map((s) => Number(s.trim().slice(1)));
}

/**
 * On a cluster, call before a test's requests of several identities and await what it
 * returns after them: the keys they added (DBSIZE per master, after minus before; the
 * tests of a file run one at a time) are on more than one master, and no node answered, in between,
 * MOVED or CROSSSLOT (each command went straight to its key's master). On one node: nothing.
 */
export async function spreadOverMasters(target: Target): Promise<() => Promise<void>> {
  if (target.cluster === undefined) return async () => undefined;
  const { ports } = target;
  const [keysBefore, redirectsBefore] = await Promise.all([keysPerNode(ports), redirects(ports)]);
  return async () => {
    const added = (await keysPerNode(ports)).map((n, i) => n - keysBefore[i]!);
    assert.ok(added.filter((n) => n > 0).length >= 2, `the identities' keys are on one master only: added ${added.join(', ')}`);
    const answered = (await redirects(ports)).map((n, i) => n - redirectsBefore[i]!);
    assert.deepEqual(answered, ports.map(() => 0), 'MOVED / CROSSSLOT answered per master (a command sent to the wrong node)');
  };
}

/** MOVED plus CROSSSLOT errors each node has answered (INFO errorstats). */
async function redirects(ports: number[]): Promise<number[]> {
  const infos = await Promise.all(ports.map((p) => rawCommand(p, 'INFO errorstats', 2000)));
  return infos.map((info) => [...info.matchAll(/errorstat_(?:MOVED|CROSSSLOT):count=(\d+)/g)]
    .reduce((sum, m) => sum + Number(m[1]), 0));
}

function clusterKinds(): string[] | undefined {
  return process.env.SW_NODE_CLUSTER_KINDS?.split(',');
}

/**
 * Registers `scenarios(target)` under `title` for every cell of the matrix. `target()` is
 * valid inside the scenarios' tests.
 */
export function storeMatrix(title: string, scenarios: (target: () => Target, cell: Cell) => void): void {
  for (const { name, skip } of kinds(ALL_KINDS)) {
    for (const backend of BACKENDS) {
      describe(`${title} [${name}] ${backend}, one node`, { skip }, () => {
        let server: Server;
        before(async () => {
          server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
        });
        after(async () => { await server.cleanup(); });
        for (const lib of LIBS) {
          perLib({ kind: name, backend, lib, topology: 'node' }, async () => connect(lib, server.port),
            () => ({ kind: name, backend, cluster: undefined, ports: [server.port] }), scenarios);
        }
      });

      const only = clusterKinds();
      const clusterSkip = skip !== false ? skip : only !== undefined && !only.includes(name) ? 'SW_NODE_CLUSTER_KINDS' : false;
      describe(`${title} [${name}] ${backend}, 3-master cluster`, { skip: clusterSkip }, () => {
        let cluster: Cluster;
        before(async () => {
          cluster = await startCluster(name, { module: backend === 'module' });
        });
        after(async () => { await cluster.cleanup(); });
        for (const lib of LIBS) {
          perLib({ kind: name, backend, lib, topology: 'cluster' }, async () => {
            const handle = await connectCluster(lib, cluster.ports);
            if (backend === 'library') assert.equal(await loadLibrary(handle.client), 3);
            return handle;
          }, () => ({ kind: name, backend, cluster, ports: cluster.ports }), scenarios);
        }
      });
    }
  }
}

function perLib(cell: Cell, open: () => Promise<Handle>, where: () => Omit<Target, 'lib' | 'client'>,
  scenarios: (target: () => Target, cell: Cell) => void): void {
  const { lib } = cell;
  describe(`via ${lib}`, () => {
    let handle: Handle | undefined;
    let current: Target | undefined;
    before(async () => {
      handle = await open();
      current = { ...where(), lib, client: handle.client };
    });
    after(async () => { await handle?.close(); });
    scenarios(() => {
      assert.ok(current !== undefined, 'target not set up');
      return current;
    }, cell);
  });
}
