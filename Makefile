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
