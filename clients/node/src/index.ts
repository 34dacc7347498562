export { SlidingWindowRateLimiter } from './limiter';
export { DenyCache, DEFAULT_MAX_ENTRIES } from './deny-cache';
export type { DenyCacheOptions, DenyCacheStats, DenyCacheOption } from './deny-cache';
export type { Backend, CallOptions, LimiterOptions, LimitsSpec } from './limiter';
export { RateLimitResult, MultiLimitResult } from './result';
export type { Limit, WindowCounts } from './result';
export { Circuit } from './circuit';
export type { CircuitOptions, Logger, Gate } from './circuit';
export { isOutage, serverAnswered, RedisTimeoutError, LibraryNotLoadedError, BackendMissingError } from './errors';
export { adapterFor, keySlot } from './adapters';
export type { Adapter, RedisClientLike, SendCommandFn } from './adapters';
export { loadLibrary, librarySource, LIBRARY_PATH, LIBRARY_VERSION, LIBRARY_SHA, LIBRARY_BODY, LOAD_COMMAND } from './library';
export { BackendState } from './backend';
export type { Mode } from './backend';
export {
  MissingPermissionError, LIBRARY_COMMANDS, LIBRARY_COMMANDS_62, LIBRARY_LINE, LIBRARY_LINE_62, OPERATOR_LINE,
} from './permissions';
export { parseLimits, MAX_LIMITS } from './rates';
export { pauseBeforeRetry } from './wait';
export type { WaitOptions } from './wait';
export { rateLimitHeaders, limitsHeaders, limitName, sfString } from './headers';
export {
  TrustedProxies, byIp, clientIdentity, clientIp, headerApiKey, headerValues, ipKey, parseIp, requestIdentity,
} from './identity';
export type {
  ApiKeyFn, ClientIdentityOptions, ForwardedFor, HeadersLike, IdentityOptions, RequestLike, TrustedProxiesLike,
} from './identity';
export { SlidingWindowStore } from './stores/express';
export type { ExpressStoreOptions } from './stores/express';
export { fastifyStore } from './stores/fastify';
export type { FastifyStoreOptions, FastifyRateLimitStore } from './stores/fastify';
export { SlidingWindowThrottlerStorage } from './stores/nest';
export type { NestStorageOptions, ThrottlerStorageRecord } from './stores/nest';
