# The test command of the README and of .ci/run. It needs Go and
# redis-server on PATH (apt-get install redis-server); with
# REDLOCK_REQUIRE_REDIS=1 the integration tests fail instead of skipping
# when redis-server is missing.
GO ?= go

.PHONY: test fmt vet bench

test: fmt vet
	REDLOCK_REQUIRE_REDIS=1 $(GO) test -race -count=1 -timeout 10m ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

bench:
	$(GO) run ./cmd/redlock-bench

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
