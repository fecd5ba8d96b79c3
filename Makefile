# The test command of the README and of .ci/run. It needs Go and
# redis-server on PATH (apt-get install redis-server); with
# REDLOCK_REQUIRE_REDIS=1 the integration tests fail instead of skipping
# when redis-server is missing. It checks and tests every Go module of the
# repository (each directory with a go.mod).
GO ?= go
MODULES := $(sort $(dir $(shell git ls-files 'go.mod' '*/go.mod' 2>/dev/null || find . -name go.mod)))
# staticcheck, pinned; STATICCHECK=staticcheck uses an installed one.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test fmt vet lint bench check-modules test-adapters-minimum test-adapters-newest test-valkey script-cost sim-mutants

test: fmt vet lint
	@for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && REDLOCK_REQUIRE_REDIS=1 $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; \
	done

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

lint:
	@for m in $(MODULES); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

bench:
	$(GO) run ./cmd/redlock-bench

# Instructions a node runs per acquisition of a hot key, the library's
# queue against a polling lock, counted by valgrind (docs/benchmarks.md,
# "Where the floor is"): repeatable on a busy machine.
script-cost:
	bash internal/scriptcost/callgrind.sh

# Builds and vets each nested module outside the workspace (GOWORK=off),
# against the versions of the core (and of the other nested modules) that
# its go.mod states, served from a module proxy in a temporary directory
# (docs/releasing.md). It writes nothing in the repository.
check-modules:
	GO=$(GO) $(GO) run ./internal/modcheck

# The tests of the adapters and of otelredlock outside the workspace, at
# the client versions their go.mod states (the lowest they claim to work
# with: in the workspace the benchmark's newer requirements win), and at
# the clients' newest.
ADAPTERS := pool/goredis,pool/rueidispool,otelredlock
ADAPTER_CLIENTS := github.com/redis/go-redis/v9,github.com/redis/rueidis,go.opentelemetry.io/otel,go.opentelemetry.io/otel/metric,go.opentelemetry.io/otel/sdk/metric
test-adapters-minimum:
	GO=$(GO) $(GO) run ./internal/modcheck -modules $(ADAPTERS) -test
test-adapters-newest:
	GO=$(GO) $(GO) run ./internal/modcheck -modules $(ADAPTERS) -test -latest $(ADAPTER_CLIENTS)

# The integration suites (tests/, pool/ and the adapters') on Valkey 8
# instead of Redis: the redis-server and redis-cli that the test harness
# starts are taken from VALKEY_DIR (a Valkey build in which they are links
# to valkey-server and valkey-cli; relative paths are from the repository's
# root). Without one there, it says so and succeeds. VALKEY_TESTFLAGS=
# runs them without the race detector (.ci/run does: make test races the
# same tests on Redis). The suites run side by side, as they mostly wait on
# their nodes; each one's output is printed whole once it ends.
# docs/operations.md lists the servers supported.
VALKEY_DIR ?= ../shared/valkey
VALKEY_TESTFLAGS ?= -race
VALKEY_SUITES := .:./tests/,./pool/ pool/goredis:./... pool/rueidispool:./...
test-valkey:
	@dir=$$(cd "$(VALKEY_DIR)" 2>/dev/null && pwd); \
	if [ -z "$$dir" ] || [ ! -x "$$dir/redis-server" ]; then \
		echo "test-valkey skipped: no Valkey at $(VALKEY_DIR)"; exit 0; \
	fi; \
	PATH="$$dir:$$PATH"; export PATH; \
	v=$$(redis-server --version) || exit 1; echo "$$v"; \
	case "$$v" in Valkey*) ;; *) echo "$$dir/redis-server is not Valkey"; exit 1;; esac; \
	logs=$$(mktemp -d); runs=""; \
	for s in $(VALKEY_SUITES); do \
		m=$${s%%:*}; pkgs=$$(echo $${s#*:} | tr , ' '); log="$$logs/$$(echo "$$m" | tr ./ __)"; \
		(echo "== go test (Valkey) $$m $$pkgs"; \
			cd $$m && REDLOCK_REQUIRE_REDIS=1 $(GO) test $(VALKEY_TESTFLAGS) -count=1 -timeout 10m $$pkgs) >"$$log" 2>&1 & \
		runs="$$runs $$!:$$log"; \
	done; \
	status=0; \
	for r in $$runs; do wait $${r%%:*} || status=1; cat "$${r#*:}"; done; \
	rm -rf "$$logs"; exit $$status

# Done when returned (docs/algorithm.md): two Clients take turns on one
# name, for every kind of lock: TURNS turns per kind on redlocktest's
# in-process nodes under the race detector, then TURNS_REAL on five
# redis-server nodes. make test runs 2,000 and 300.
TURNS ?= 100000
TURNS_REAL ?= 5000
.PHONY: turns
turns:
	REDLOCK_TURNS=$(TURNS) $(GO) test -race -count=1 -timeout 0 -run '^TestTurns$$' ./redlocktest/
	REDLOCK_REQUIRE_REDIS=1 REDLOCK_TURNS=$(TURNS_REAL) $(GO) test -count=1 -timeout 0 -run '^TestTurns$$' ./tests/

# The previous version of the library beside this one on the same nodes
# (tests/compat_test.go): COMPAT_BASE is the earlier commit (default: the
# one the test names), COMPAT_TIME the run (make test runs 10s).
COMPAT_TIME ?= 60s
COMPAT_BASE ?=
.PHONY: compat
compat:
	REDLOCK_REQUIRE_REDIS=1 REDLOCK_REQUIRE_COMPAT=1 REDLOCK_COMPAT_TIME=$(COMPAT_TIME) REDLOCK_COMPAT_BASE=$(COMPAT_BASE) $(GO) test -count=1 -timeout 0 -v -run '^TestCompat' ./tests/

# The fault-injection soak (docs/safety.md): in-model faults for
# REDLOCK_SOAK (default 20m), then a summary of acquisitions, faults by
# kind, violations, lost updates, stale writes and error kinds. Replay a
# schedule with REDLOCK_FAULT_SEED=<seed>; SOAK_FLAGS=-race adds the race
# detector.
REDLOCK_SOAK ?= 20m
SOAK_FLAGS ?=
.PHONY: soak
soak:
	REDLOCK_REQUIRE_REDIS=1 REDLOCK_SOAK=$(REDLOCK_SOAK) $(GO) test $(SOAK_FLAGS) -count=1 -timeout 0 -run '^TestSafety_soak$$' -v ./tests/

# The deterministic simulator (docs/safety.md, "The simulator"): seeds run
# one after another until SIM_TIME of CPU time has passed, each a few
# Clients using every kind of lock on in-process nodes under a seeded
# schedule of faults, in virtual time. SEED=<seed> replays one seed (its
# trace is printed when it fails). The last line is the summary: seeds,
# acquisitions, faults, virtual time, CPU seconds and violations; the exit
# status is non-zero when there was a violation. make test runs a short
# one with the race detector.
SIM_TIME ?= 60s
SEED ?=
.PHONY: sim
sim:
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) test -c -o "$$dir/sim.test" ./internal/sim && \
	cd internal/sim && "$$dir/sim.test" -test.run '^TestSim$$' -test.timeout 0 -sim.time=$(SIM_TIME) $(if $(SEED),-sim.seed=$(SEED) -test.v)

# Proof that the simulator catches planted defects: each mutant of
# internal/sim/mutants (a one-line defect in redlock/ or a script) is
# planted in a copy of the working tree, and the simulator runs seeds
# from 1 for 2 minutes of CPU, one mutant after another. It prints each
# mutant's catching seed, CPU seconds and first violation, then a table;
# it fails when a mutant is missed (unless the table expects the miss and
# says why) or stale. MUTANT=<name>[,<name>] runs only those.
MUTANT ?=
sim-mutants:
	$(GO) run ./internal/sim/mutants $(if $(MUTANT),-only $(MUTANT))
