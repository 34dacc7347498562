/**
 * Which errors are outages: states of the server that can end without anyone touching the
 * app (restart, failover, loading, resync, memory freed). The limiter answers those without
 * Redis (fail-open or fail-closed); every other error is the app's configuration or code and
 * is thrown, as it would be without a limiter. The same table as the Python client's.
 */

/** A call to Redis that got no reply within the limiter's `timeoutMs`. */
export class RedisTimeoutError extends Error {
  override readonly name = 'RedisTimeoutError';
  constructor(readonly timeoutMs: number) {
    super(`no reply from Redis within ${timeoutMs} ms`);
  }
}

/**
 * Neither the slidingwindow module nor its Functions library is on the server, and this
 * user may not load the library (NOPERM on FUNCTION LOAD). A configuration error: thrown,
 * never failed open; the message names the command an operator runs.
 */
export class LibraryNotLoadedError extends Error {
  override readonly name = 'LibraryNotLoadedError';
}

/** @deprecated use LibraryNotLoadedError (the same class). */
export const BackendMissingError = LibraryNotLoadedError;
/** @deprecated use LibraryNotLoadedError (the same class). */
export type BackendMissingError = LibraryNotLoadedError;

// Error replies that are states of the server.
const OUTAGE_REPLY = /^(LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|OOM|TRYAGAIN)\b/;
// Error replies that are configuration, even where a client library reports them as a
// connection problem: no probe can repair a password or an ACL grant.
const CONFIG_REPLY = /^(NOAUTH|WRONGPASS|NOPERM)\b/;
// Socket errors (Node's error codes).
const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTCONN', 'EHOSTUNREACH',
  'ENETUNREACH', 'ENETDOWN', 'EHOSTDOWN', 'ECONNABORTED', 'EAI_AGAIN', 'ENOTFOUND',
]);
// The client libraries' own "could not reach the server" errors, by class name.
const NETWORK_NAMES = new Set([
  'RedisTimeoutError',
  'MaxRetriesPerRequestError', // ioredis: the server stayed unreachable for N reconnects
  'ClusterAllFailedError', // ioredis: "Failed to refresh slots cache."
  'SocketClosedUnexpectedlyError', // node-redis
  'ConnectionTimeoutError', // node-redis
  'SocketTimeoutError', // node-redis
  'ClientOfflineError', // node-redis with disableOfflineQueue
  'RootNodesUnavailableError', // node-redis cluster
  'ReconnectStrategyError', // node-redis
  'TimeoutError', // node-redis command timeout
]);
// ioredis reports these as plain Errors.
const NETWORK_MESSAGES = [
  /^Connection is closed\.?$/,
  /^Too many Cluster redirections/, // the cluster kept redirecting (a failover in progress)
  /^None of startup nodes is available/,
  /^Failed to refresh slots cache/,
  /^Cluster isn't ready/,
  /^Stream isn't writeable/, // ioredis with enableOfflineQueue: false
];

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Whether `err` means Redis cannot answer now (an outage), not that the call is wrong. */
export function isOutage(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const text = err.message;
  if (CONFIG_REPLY.test(text)) return false;
  if (OUTAGE_REPLY.test(text)) return true;
  const wrapped = (err as { lastNodeError?: unknown; cause?: unknown });
  if (err.name === 'ClusterAllFailedError' && wrapped.lastNodeError !== undefined
      && CONFIG_REPLY.test(message(wrapped.lastNodeError))) {
    return false; // ioredis: every node refused our password
  }
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
  if (NETWORK_NAMES.has(err.name) || NETWORK_NAMES.has(err.constructor.name)) return true;
  if (NETWORK_MESSAGES.some((re) => re.test(text))) return true;
  // AggregateError (Node's net with happy eyeballs): every address refused.
  if (err instanceof AggregateError) return err.errors.length > 0 && err.errors.every(isOutage);
  return false;
}

/** Whether a probe reached a working server: a reply, or an error reply that is no outage
 * (WRONGTYPE on the probed key proves the server is back). */
export function serverAnswered(err: unknown): boolean {
  if (err === undefined) return true;
  if (!(err instanceof Error) || isOutage(err)) return false;
  return /^[A-Z][A-Z_-]+\b/.test(err.message) && /Reply|Error/.test(err.name);
}
