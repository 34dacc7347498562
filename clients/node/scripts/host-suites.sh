#!/usr/bin/env bash
# Runs the host libraries' own store tests against our stores on a real server (issue #23).
#
#   scripts/host-suites.sh [--backend module|library|both] \
#       [--rate-limit-redis DIR] [--express-rate-limit DIR] [--fastify-rate-limit DIR] [--throttler DIR]
#
# Each DIR is a checkout of that repository with its dev dependencies installed (npm install);
# this script fetches nothing. It writes its shims and the edited copies of the test files
# into DIR/.sw-host/ (never into the upstream files), starts redis-server on 127.0.0.1 on a
# free port (with the module, or without it and the Functions library loaded), runs each suite
# with our store injected, and stops the server on exit. REDIS_SERVER (default
# /usr/bin/redis-server) and SW_MODULE (default target/release/libredis_slidingwindow.so) override.
# Excluded tests are skipped by name below, each with its reason; the README lists them.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)   # clients/node
root=$(cd "$here/../.." && pwd)
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
SW_MODULE=${SW_MODULE:-$root/target/release/libredis_slidingwindow.so}
backend=both rlr='' erl='' frl='' thr=''
while [ $# -gt 0 ]; do
  case $1 in
    --backend) backend=$2; shift 2 ;;
    --rate-limit-redis) rlr=$(cd "$2" && pwd); shift 2 ;;
    --express-rate-limit) erl=$(cd "$2" && pwd); shift 2 ;;
    --fastify-rate-limit) frl=$(cd "$2" && pwd); shift 2 ;;
    --throttler) thr=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$rlr$erl$frl$thr" ] || { echo "give at least one checkout (--help)" >&2; exit 2; }
for d in $rlr $erl $frl $thr; do
  [ -d "$d/node_modules" ] || { echo "$d: no node_modules (run npm install there first)" >&2; exit 2; }
done
[ -f "$here/build/src/index.js" ] || (cd "$here" && npm run build >/dev/null)
[ -d "$here/node_modules/ioredis" ] || { echo "$here: run npm ci first (the shims use its ioredis and redis)" >&2; exit 2; }
if [ "$backend" != library ] && [ ! -f "$SW_MODULE" ]; then
  echo "$SW_MODULE: not built (cargo build --release, or SW_MODULE=..., or --backend library)" >&2; exit 2
fi
export SW_PKG=$here
skip="node $here/scripts/skip-tests.cjs"

tmp=$(mktemp -d)
logs=${SW_HOST_LOGS:-$tmp}; mkdir -p "$logs"   # SW_HOST_LOGS=DIR keeps the logs
server_pid=''
stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=''
}
trap 'stop_server; rm -rf "$tmp"' EXIT

start_server() { # $1: module | library
  REDIS_PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  export REDIS_PORT
  local args=(--port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp")
  [ "$1" = module ] && args+=(--loadmodule "$SW_MODULE")
  "$REDIS_SERVER" "${args[@]}" >"$tmp/redis-$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" PING >/dev/null 2>&1 && break; sleep 0.1; done
  if ! redis-cli -p "$REDIS_PORT" PING >/dev/null 2>&1; then
    echo "redis-server did not start:" >&2; tail -n 5 "$tmp/redis-$1.log" >&2; exit 1
  fi
  if [ "$1" = library ]; then
    redis-cli -p "$REDIS_PORT" FUNCTION LOAD REPLACE "$(cat "$root/lua/slidingwindow.lua")" >/dev/null
  fi
  echo "== redis-server on 127.0.0.1:$REDIS_PORT ($1)"
}

results=()
record() { # $1 suite, $2 log, $3 jest|node
  local line
  if [ "$3" = jest ]; then line=$(grep -E '^Tests:' "$2" | tail -1)
  else line=$(grep -E '^ℹ (tests|pass|fail|skipped) ' "$2" | tr '\n' ' '); fi
  results+=("$1 [$backend_now]: ${line:-no summary, see $2}")
  echo "   $1: ${line:-no summary}"
}

# --- rate-limit-redis: test/store-test.ts, its RedisStore and ioredis-mock replaced ---------
run_rlr() {
  local s=$rlr/.sw-host; mkdir -p "$s"
  cat >"$s/store.cjs" <<'EOF'
// Our SlidingWindowStore under rate-limit-redis's names (default prefix rl:, as theirs).
const { SlidingWindowStore } = require(process.env.SW_PKG + '/build/src/index.js')
class RedisStore extends SlidingWindowStore {
  constructor (options = {}) {
    const { resetExpiryOnChange, ...rest } = options
    super({ prefix: 'rl:', ...rest })
  }
}
module.exports = { RedisStore, default: RedisStore, __esModule: true }
EOF
  cat >"$s/ioredis-mock.cjs" <<'EOF'
// ioredis-mock replaced by a real ioredis client to the test server (connected when loaded).
const Redis = require(process.env.SW_PKG + '/node_modules/ioredis')
class RealRedis extends Redis {
  constructor () { super({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT) }) }
}
module.exports = RealRedis
module.exports.default = RealRedis
EOF
  cat >"$s/jest.config.cjs" <<'EOF'
module.exports = {
  rootDir: '..', verbose: true, testTimeout: 30000,
  testMatch: ['<rootDir>/.sw-host/*-test.ts'],
  moduleFileExtensions: ['js', 'cjs', 'json', 'ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] },
  moduleNameMapper: {
    '^\\.\\./source/index(\\.js)?$': '<rootDir>/.sw-host/store.cjs',
    '^ioredis-mock$': '<rootDir>/.sw-host/ioredis-mock.cjs',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
}
EOF
  # The test's sendCommand wrapper answers -99 to commands ioredis-mock lacks: send them to
  # the server instead. Lines reading rate-limit-redis's own key layout (GET = count, PTTL =
  # windowMs) are dropped; the tests made only of them are excluded. Their `windowMs: 10`
  # never ends under the mock's frozen (fake) clock; on the server's real clock it ends within
  # a few round trips, so it becomes 10 s (the wait-adapted test keeps its 50 ms).
  sed -e 's/^\treturn -99$/\treturn client.call(args[0], ...args.slice(1)) as Promise<RedisReply>/' \
      -e 's/windowMs: 10 }/windowMs: 10_000 }/' \
    "$rlr/test/store-test.ts" >"$s/store.in.ts"
  $skip "$s/store.in.ts" "$s/store-test.ts" --real-waits \
    --drop "expect\\(Number\\(await client\\.(get|pttl)\\(" \
    'supports custom prefixes' \
    'resets expiry time on change if `resetExpiryOnChange` is set to `true`' \
    'resets the count for all the keys in the store when the timeout is reached' \
    'unit: when PTTL==0 but key exists, script starts new window with 1' \
    'should bind sendCommand to this' \
    'should bind sendCommandCluster to this'
  rm "$s/store.in.ts"
  (cd "$rlr" && npx jest -c .sw-host/jest.config.cjs --forceExit) >"$logs/rlr.log" 2>&1 || true
  record "rate-limit-redis test/store-test.ts" "$logs/rlr.log" jest
}

# --- express-rate-limit: MemoryStore replaced by ours (the store tests, and the middleware and
# headers tests that use the default store); the external stores test with rate-limit-redis ---
run_erl() {
  local s=$erl/.sw-host; mkdir -p "$s"
  cat >"$s/memory-store.cjs" <<'EOF'
// express-rate-limit's MemoryStore replaced by our SlidingWindowStore. The client connects
// when this loads, before a test's jest.useFakeTimers().
const { randomUUID } = require('node:crypto')
const Redis = require(process.env.SW_PKG + '/node_modules/ioredis')
const { SlidingWindowStore } = require(process.env.SW_PKG + '/build/src/index.js')
const client = new Redis({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT) })
class MemoryStore extends SlidingWindowStore {
  // Each instance has keys of its own, as each MemoryStore has its own maps.
  constructor () { super({ client, prefix: `erl-host:${randomUUID()}:` }) }
}
module.exports = { MemoryStore, __esModule: true }
EOF
  cat >"$s/jest.config.cjs" <<'EOF'
module.exports = {
  rootDir: '..', verbose: true, testTimeout: 30000,
  testMatch: ['<rootDir>/.sw-host/*-test.ts'],
  moduleFileExtensions: ['js', 'cjs', 'json', 'ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] },
  moduleNameMapper: {
    '^(\\.{1,2}/)+source/memory-store(\\.js)?$': '<rootDir>/.sw-host/memory-store.cjs',
    '^\\./memory-store(\\.js)?$': '<rootDir>/.sw-host/memory-store.cjs',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
}
EOF
  local f
  for f in memory-store middleware headers; do
    sed -e "s#'\.\./\.\./source/#'../source/#g" \
        -e "s#'\./helpers/create-server\.js'#'../test/library/helpers/create-server.js'#" \
        "$erl/test/library/$f-test.ts" >"$s/$f.in.ts"
  done
  $skip "$s/memory-store.in.ts" "$s/memory-store-test.ts" --real-waits \
    'resetKey should remove the key from storage' \
    'resets the count for all keys in the store when `resetAll` is called' \
    'clears the timer when `shutdown` is called' \
    'can run in electron where setInterval does not return a Timeout object with an unset function' \
    'should automatically clear previously set intervals' \
    'should move clients from previous to current'
  $skip "$s/middleware.in.ts" "$s/middleware-test.ts" \
    'should (eventually) accept new connections from a blocked IP' \
    'should work repeatedly'
  $skip "$s/headers.in.ts" "$s/headers-test.ts" \
    'should send correct `x-ratelimit-limit`, `x-ratelimit-remaining`, and `x-ratelimit-reset` headers' \
    'should send correct `ratelimit-*` headers for the standard headers draft 6' \
    'should send policy and combined ratelimit headers for the standard draft 7' \
    'should send correct headers for the standard draft 8' \
    'should send multiple headers correctly for the standard draft 8' \
    'should override the quota name if specified for the standard draft 8' \
    'should return the `retry-after` header once IP has reached the max'
  rm "$s"/*.in.ts
  for f in memory-store middleware headers; do
    (cd "$erl" && npx jest -c .sw-host/jest.config.cjs --forceExit ".sw-host/$f-test.ts") >"$logs/erl-$f.log" 2>&1 || true
    record "express-rate-limit test/library/$f-test.ts" "$logs/erl-$f.log" jest
  done

  # test/external/stores: its redis app (rate-limit-redis + node-redis createClient()) with
  # rate-limit-redis replaced by our store and createClient() pointed at the test server.
  cat >"$s/rate-limit-redis.mjs" <<'EOF'
import { createRequire } from 'node:module'
const require = createRequire(import.meta.url)
const { SlidingWindowStore } = require(process.env.SW_PKG + '/build/src/index.js')
export default SlidingWindowStore
export { SlidingWindowStore as RedisStore }
EOF
  cat >"$s/redis.mjs" <<'EOF'
import { createRequire } from 'node:module'
const require = createRequire(import.meta.url)
const redis = require(process.env.SW_PKG + '/node_modules/redis')
export const createClient = (options = {}) =>
  redis.createClient({ ...options, socket: { host: '127.0.0.1', port: Number(process.env.REDIS_PORT), ...options.socket } })
EOF
  echo 'export default null // the mongo and memcached cases are excluded (other stores)' >"$s/other-store.mjs"
  cat >"$s/jest.external.mjs" <<'EOF'
export default {
  rootDir: '..', verbose: true, testTimeout: 30000,
  testMatch: ['<rootDir>/test/external/stores/test/*-test.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  moduleFileExtensions: ['js', 'mjs', 'json', 'ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, diagnostics: false,
    tsconfig: { module: 'ESNext', target: 'ES2022', moduleResolution: 'node', esModuleInterop: true, isolatedModules: true } }] },
  moduleNameMapper: {
    '^\\.\\./source/(mongo|memcached)-store\\.js$': '<rootDir>/.sw-host/other-store.mjs',
    '^rate-limit-redis$': '<rootDir>/.sw-host/rate-limit-redis.mjs',
    '^redis$': '<rootDir>/.sw-host/redis.mjs',
    '^express-rate-limit$': '<rootDir>/source/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
}
EOF
  (cd "$erl" && NODE_OPTIONS=--experimental-vm-modules npx jest -c .sw-host/jest.external.mjs --forceExit -t 'redis store') >"$logs/erl-external.log" 2>&1 || true
  record "express-rate-limit test/external/stores" "$logs/erl-external.log" jest
}

# --- @fastify/rate-limit: test/redis-rate-limit.test.js, the plugin's RedisStore replaced ----
run_frl() {
  local s=$frl/.sw-host; mkdir -p "$s"
  cat >"$s/redis-store.cjs" <<'EOF'
// The plugin's RedisStore (its `redis` option) replaced by our store on the same ioredis
// client; nameSpace (default 'fastify-rate-limit-') is our key prefix.
const { fastifyStore } = require(process.env.SW_PKG + '/build/src/index.js')
module.exports = function RedisStore (continueExceeding, exponentialBackoff, redis, nameSpace = 'fastify-rate-limit-') {
  const Store = fastifyStore({ client: redis, prefix: nameSpace })
  return new Store()
}
EOF
  cat >"$s/preload.cjs" <<'EOF'
// node --require: the plugin's ./store/RedisStore resolves to the shim.
const Module = require('node:module')
const path = require('node:path')
const target = path.resolve(__dirname, '..', 'store', 'RedisStore.js')
const shim = path.join(__dirname, 'redis-store.cjs')
const resolve = Module._resolveFilename
Module._resolveFilename = function (request, ...rest) {
  const found = resolve.call(this, request, ...rest)
  return found === target ? shim : found
}
EOF
  # The tests connect to 127.0.0.1:6379: give them the test server's port, and start each
  # from an empty server (upstream flushes only at the end of a test that passed).
  sed -E -e 's/new Redis\(\{ host: REDIS_HOST \}\)/new Redis({ host: REDIS_HOST, port: Number(process.env.REDIS_PORT) })/g' \
    -e 's/^(\s*)const redis = (await )?new Redis\((.*)\)$/&\n\1await redis.flushall()/' \
    "$frl/test/redis-rate-limit.test.js" >"$s/redis.in.js"
  $skip "$s/redis.in.js" "$s/redis-rate-limit.test.js" \
    'Global rate limit::With redis store' \
    'Global rate limit::With redis store (ban)' \
    'Global rate limit::Throw on redis error' \
    'Global rate limit::When continue exceeding is on (Redis)' \
    'Global rate limit::Redis with continueExceeding should not always return the timeWindow as ttl' \
    'Global rate limit::When use a custom nameSpace' \
    'Global rate limit::With redis store and exponential backoff' \
    'Global rate limit::With { increment: false } it throws on redis error' \
    'Route rate limit::With redis store' \
    'Route rate limit::Throw on redis error' \
    'Route rate limit::When continue exceeding is on (Redis)' \
    'Route rate limit::When continue exceeding is off under route (Redis)' \
    'Route rate limit::Route-specific exponential backoff with redis store'
  rm "$s/redis.in.js"
  (cd "$frl" && node --require ./.sw-host/preload.cjs --test --test-reporter=spec .sw-host/redis-rate-limit.test.js) >"$logs/frl.log" 2>&1 || true
  record "@fastify/rate-limit test/redis-rate-limit.test.js" "$logs/frl.log" node
}

# --- @nestjs/throttler: src/throttler.service.spec.ts, ThrottlerStorageService replaced -----
run_thr() {
  local s=$thr/.sw-host; mkdir -p "$s"
  cat >"$s/throttler.service.cjs" <<'EOF'
// The in-memory ThrottlerStorageService replaced by our storage (a key prefix per instance).
const { randomUUID } = require('node:crypto')
const Redis = require(process.env.SW_PKG + '/node_modules/ioredis')
const { SlidingWindowThrottlerStorage } = require(process.env.SW_PKG + '/build/src/index.js')
const client = new Redis({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT) })
class ThrottlerStorageService extends SlidingWindowThrottlerStorage {
  constructor () { super({ client, prefix: `nest-host:${randomUUID()}:` }) }
  onApplicationShutdown () {}
}
module.exports = { ThrottlerStorageService, __esModule: true }
EOF
  cat >"$s/jest.config.cjs" <<'EOF'
module.exports = {
  rootDir: '..', verbose: true, testTimeout: 30000,
  testMatch: ['<rootDir>/.sw-host/*.spec.ts'],
  moduleFileExtensions: ['js', 'cjs', 'json', 'ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] },
  moduleNameMapper: {
    '^\\./throttler\\.service$': '<rootDir>/.sw-host/throttler.service.cjs',
    '^\\./throttler-storage\\.interface$': '<rootDir>/src/throttler-storage.interface',
  },
}
EOF
  cp "$thr/src/throttler.service.spec.ts" "$s/throttler.service.spec.ts"
  (cd "$thr" && npx jest -c .sw-host/jest.config.cjs --forceExit) >"$logs/thr.log" 2>&1 || true
  record "@nestjs/throttler src/throttler.service.spec.ts" "$logs/thr.log" jest
  # test/controller.e2e-spec.ts: the apps' default storage (no `storage` option) is ours.
  cat >"$s/jest.e2e.cjs" <<'EOF'
module.exports = {
  rootDir: '..', verbose: true, testEnvironment: 'node',
  testMatch: ['<rootDir>/test/*.e2e-spec.ts'],
  moduleFileExtensions: ['js', 'cjs', 'json', 'ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] },
  moduleNameMapper: { '^\\./throttler\\.service$': '<rootDir>/.sw-host/throttler.service.cjs' },
}
EOF
  # Excluded: LimitController and DefaultController (Express and Fastify) expect the full
  # limit right after blockDuration, which the in-memory storage gives by zeroing the count
  # when a block ends; ours keeps the window's count (blockDuration 5-20 s < 2 ttl there).
  (cd "$thr" && npx jest -c .sw-host/jest.e2e.cjs --forceExit -t '^(?!.*(LimitController|DefaultController))') >"$logs/thr-e2e.log" 2>&1 || true
  record "@nestjs/throttler test/controller.e2e-spec.ts" "$logs/thr-e2e.log" jest
}

case $backend in both) backends=(module library) ;; module|library) backends=("$backend") ;;
  *) echo "--backend: module, library or both" >&2; exit 2 ;; esac
for backend_now in "${backends[@]}"; do
  start_server "$backend_now"
  [ -z "$rlr" ] || run_rlr
  [ -z "$erl" ] || run_erl
  [ -z "$frl" ] || run_frl
  [ -z "$thr" ] || run_thr
  stop_server
done
echo
echo "== results (logs in $logs; removed on exit unless SW_HOST_LOGS was given)"
printf '%s\n' "${results[@]}"
if printf '%s\n' "${results[@]}" | grep -qE 'failed|ℹ fail [1-9]|no summary'; then exit 1; fi
