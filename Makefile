# laneq — make targets. `make help` lists them.
#
# Heavy tools are built once into $(LANEQ_CACHE) under a directory named after
# a hash of everything that determines the binary (the tool module's go.mod
# and go.sum, toolchain, flags). A fresh clone on a machine that already built
# the same inputs reuses the binary; a changed input builds a new one.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
LANEQ_CACHE ?= $(HOME)/.cache/laneq
ROOT        := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))

# --- embedded TiDB (tools/tidb) ---------------------------------------------
TIDB_VERSION   := v8.5.6
# tidb-server built with Go 1.26 panics at start-up; the hack package only
# supports go1.25. The toolchain is fetched through the Go module proxy.
TIDB_TOOLCHAIN := go1.25.8
# In v8.5.6 the release string lives in the parser module (pkg/util/versioninfo
# has no such variable any more); VERSION() and tidb_version() derive from it.
TIDB_LDFLAGS   := -checklinkname=0 -X github.com/pingcap/tidb/pkg/parser/mysql.TiDBReleaseVersion=$(TIDB_VERSION)
# Static, so the same binary also runs in a FROM-scratch image.
TIDB_CGO       := 0
TIDB_KEY       := $(shell { cat tools/tidb/go.mod tools/tidb/go.sum; echo '$(TIDB_TOOLCHAIN) $(TIDB_CGO) $(TIDB_LDFLAGS)'; } | sha256sum | cut -c1-16)
TIDB_CACHED    := $(LANEQ_CACHE)/tidb-$(TIDB_VERSION)-$(TIDB_KEY)/tidb-server
TIDB_BIN       := $(ROOT)/bin/tidb-server
TIDB_IMAGE     ?= pingcap/tidb:$(TIDB_VERSION)

# --- sqlc (tools/sqlc) --------------------------------------------------------
SQLC_KEY    := $(shell cat tools/sqlc/go.mod tools/sqlc/go.sum | sha256sum | cut -c1-16)
SQLC_CACHED := $(LANEQ_CACHE)/sqlc-$(SQLC_KEY)/sqlc
SQLC_BIN    := $(ROOT)/bin/sqlc

# --- golangci-lint (tools/golangci) ---------------------------------------------
GOLANGCI_KEY    := $(shell cat tools/golangci/go.mod tools/golangci/go.sum | sha256sum | cut -c1-16)
GOLANGCI_CACHED := $(LANEQ_CACHE)/golangci-lint-$(GOLANGCI_KEY)/golangci-lint
GOLANGCI_BIN    := $(ROOT)/bin/golangci-lint

# Tests and plancheck find the embedded server through this variable.
export LANEQ_TIDB_SERVER ?= $(TIDB_BIN)

# Flags for `make test`; override e.g. TEST_FLAGS='-run Migrat -v'.
TEST_FLAGS ?=

.PHONY: help
help: ## List targets.
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# --- tools ----------------------------------------------------------------------

$(TIDB_CACHED):
	@echo "==> building tidb-server $(TIDB_VERSION) with $(TIDB_TOOLCHAIN) (cold build: ~10 min on 2 cores)"
	@mkdir -p $(dir $@)
	cd tools/tidb && CGO_ENABLED=$(TIDB_CGO) GOTOOLCHAIN=$(TIDB_TOOLCHAIN) $(GO) build -trimpath \
		-ldflags '$(TIDB_LDFLAGS)' -o $@.tmp github.com/pingcap/tidb/cmd/tidb-server
	@mv $@.tmp $@

$(TIDB_BIN): $(TIDB_CACHED)
	@mkdir -p $(dir $@)
	@ln -sfn $< $@
	@touch -h $@

.PHONY: tidb
tidb: $(TIDB_BIN) ## Build the embedded tidb-server (only when missing or its inputs changed).
	@echo "tidb-server: $(TIDB_BIN) -> $(TIDB_CACHED)"

.PHONY: tidb-image
tidb-image: $(TIDB_BIN) ## Build a local $(TIDB_IMAGE) image from the source-built binary (no registry needed).
	@TIDB_IMAGE='$(TIDB_IMAGE)' TIDB_KEY='$(TIDB_KEY)' TIDB_BIN='$(TIDB_CACHED)' FORCE=1 tools/tidb/image.sh

# Used by `make test`: builds the local image only when a Docker daemon answers
# and no image with that tag exists (or it is an older local build), so a real
# published image is never overwritten.
.PHONY: tidb-image-if-docker
tidb-image-if-docker: $(TIDB_BIN)
	@TIDB_IMAGE='$(TIDB_IMAGE)' TIDB_KEY='$(TIDB_KEY)' TIDB_BIN='$(TIDB_CACHED)' FORCE=0 tools/tidb/image.sh

$(SQLC_CACHED):
	@echo "==> building sqlc (tools/sqlc, ~2 min cold)"
	@mkdir -p $(dir $@)
	cd tools/sqlc && $(GO) build -o $@.tmp github.com/sqlc-dev/sqlc/cmd/sqlc
	@mv $@.tmp $@

$(SQLC_BIN): $(SQLC_CACHED)
	@mkdir -p $(dir $@)
	@ln -sfn $< $@
	@touch -h $@

.PHONY: sqlc
sqlc: $(SQLC_BIN) ## Build the pinned sqlc (v1.31.1).

$(GOLANGCI_CACHED):
	@echo "==> building golangci-lint (tools/golangci, ~3 min cold)"
	@mkdir -p $(dir $@)
	cd tools/golangci && $(GO) build -o $@.tmp github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@mv $@.tmp $@

$(GOLANGCI_BIN): $(GOLANGCI_CACHED)
	@mkdir -p $(dir $@)
	@ln -sfn $< $@
	@touch -h $@

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_BIN) ## Build the pinned golangci-lint (v2.15.0).

# --- code generation ------------------------------------------------------------

.PHONY: generate
generate: $(SQLC_BIN) ## Regenerate gen/ from schema/ and queries/.
	$(SQLC_BIN) generate -f sqlc.yaml

.PHONY: check-generate
check-generate: $(SQLC_BIN) ## Fail when gen/ differs from a fresh sqlc generation.
	@$(SQLC_BIN) diff -f sqlc.yaml || { echo "gen/ is stale: run 'make generate' and commit gen/"; exit 1; }

# --- quality --------------------------------------------------------------------

.PHONY: lint
# The code modules' go.mod must be what `go mod tidy` writes: a direct import
# marked indirect (or a stale requirement) fails here, not in a user's build.
MODULES = . tools/uitest
lint: $(GOLANGCI_BIN) ## go vet, gofmt, golangci-lint (depguard keeps test harnesses out of library code) and go.mod tidiness.
	$(GO) vet ./...
	cd tools/uitest && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_BIN) run ./...
	@for m in $(MODULES); do \
		(cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "$$m/go.mod is not tidy: run 'cd $$m && go mod tidy' and commit it"; exit 1; }; \
	done
	@echo "lint: ok"

# --- headless Chromium (tools/uitest drives the dashboard in it) -------------------
.PHONY: chromium
chromium: ## Install Chromium (Debian package) when no chromium is on PATH.
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || [ -n "$${LANEQ_CHROMIUM:-}" ]; then \
		echo "chromium: $$(command -v chromium || command -v chromium-browser || echo $$LANEQ_CHROMIUM)"; \
	else \
		echo "chromium: installing the Debian package"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q chromium >/dev/null; }; \
		command -v chromium; \
	fi

.PHONY: screenshots
screenshots: tidb chromium ## Retake the dashboard screenshots in cmd/laneq/dashboard/screenshots.
	cd tools/uitest && LANEQ_SCREENSHOTS=$(ROOT)/cmd/laneq/dashboard/screenshots $(GO) test -count=1 -run 'Chromium|TestDashboardActions' ./...

# --- the two jobs in README -----------------------------------------------------

.PHONY: test
# The controller, scheduler and crash-matrix suites are deterministic call
# budgets; they also run 50 times plain and 20 times under -race.
BUDGET_PKGS = ./runtime/controller/ ./runtime/scheduler/ ./runtime/crashmatrix/ ./runtime/clock/
# One TiDB for every test binary (see internal/tidbenv/cmd/withtidb): found
# by LANEQ_TIDB_DSN, else a Docker container, else the embedded server.
WITHTIDB = $(GO) run ./internal/tidbenv/cmd/withtidb --
# Many tests wait on leases, timers and round trips rather than the CPU:
# run more of them at once than there are cores. Not many more: TiDB's CPU
# is the limit, each running test holds a pooled database (27 DDLs to make,
# serialized server-wide), and more contention only adds lock waits.
TEST_PARALLEL ?= 4
# go test starts package binaries in the order it is given them: the
# longest first, so the suite does not end waiting on one of them alone.
LONG_PKGS = ./runtime/workqueue/ ./runtime/worker/ ./plancheck/ .
test: check-generate lint tidb tidb-image-if-docker chromium ## Run every test (race detector on) against real TiDB.
	$(WITHTIDB) $(MAKE) --no-print-directory test-suites

.PHONY: test-suites
test-suites:
	$(GO) test -race -count=1 -parallel $(TEST_PARALLEL) -timeout 45m $(TEST_FLAGS) $(LONG_PKGS) ./...
	cd tools/uitest && $(GO) test -race -count=1 -timeout 10m $(TEST_FLAGS) ./...
	$(GO) test -count=50 -timeout 10m $(BUDGET_PKGS)
	$(GO) test -race -count=20 -timeout 10m $(BUDGET_PKGS)

.PHONY: check
# Packages whose tests never touch TiDB (computed: their test binaries do
# not link internal/tidbenv), and the TiDB-free tests of the others. `make
# check` runs them with LANEQ_TIDB=dsn and no DSN, so a test listed here that
# starts needing TiDB fails at once instead of quietly finding a server.
PURE_PKGS = $(shell $(GO) list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... \
	| awk '$$1 ~ /\.test$$/ && $$0 !~ /internal\/tidbenv/ {sub(/\.test$$/, "", $$1); print $$1}')
# One regex over the mixed packages. `make check` counts the tests that ran
# against the names listed: a renamed or removed test (0 runs) or a name
# that matches in two packages fails it, and so does a listed test that
# needs TiDB, so the list cannot drift silently.
CHECK_PKGS = ./cmd/laneq/bench/ ./cmd/laneq/dashboard/ ./runtime/worker/ ./runtime/workqueue/ \
	./runtime/ratelimit/ ./runtime/periodic/ ./runtime/stats/ ./runtime/ingress/ ./plancheck/ \
	./queries/ ./internal/store/ ./internal/tidbenv/
CHECK_RUN = ^(TestFaultSchedule|TestKilledDuring|TestOutcomeWord|TestWorkloadRateKeys|TestWorkloadShape|TestWorkloadStubborn$\
	|TestAllowedHostsValidated|TestHostAllowed|TestMetricsLabelEscaping|TestReadLogin$\
	|TestFromEnv|TestFromEnvRejectsBadValuesTogether|TestUnsafeSettingsAreReported|TestFailureOf$\
	|TestChooseTakesItsBlockFirst|TestJitterNeverExceedsTheCap|TestLoadDataEscapesWhatTheFormatReads$\
	|TestNoteLossesSpreadsAndNarrows|TestPaddedIDsBoundTheStatementTexts|TestPartialRetryPolicyTakesFieldDefaults$\
	|TestRetryDelays|TestSustainedFailureIsBounded|TestLockWaitTimeoutsAreTransient$\
	|TestBudgetNames|TestLimitValidation|TestLimitsSharingAKey|TestRefusalsFillLaterWindowsOnce$\
	|TestSweepForgetsOnlyIdleKeys|TestWindowsHoldNPerPeriod|TestScheduleValidation|TestTicks|TestFormatCount$\
	|TestBindExpandsEmbed|TestExecTime|TestGoldenShapes|TestInterleavedMediansShareABurst$\
	|TestJudgeChurn|TestJudgeTime|TestParsePlan|TestLoadsParse|TestStatementsMatchGeneratedMethods$\
	|TestConversions|TestDSNBranchErrors|TestOptionsFromEnv|TestSessionSettingsMatchWorkqueue)$$
check: check-generate lint ## The edit loop: generation drift, lint, and every test that needs no TiDB (< 60 s).
	LANEQ_TIDB=dsn LANEQ_TIDB_DSN= $(GO) test -count=1 $(PURE_PKGS)
	@out=$$(LANEQ_TIDB=dsn LANEQ_TIDB_DSN= $(GO) test -count=1 -v -run '$(CHECK_RUN)' $(CHECK_PKGS) 2>&1) \
		|| { echo "$$out" | grep -v '^=== \|^--- PASS\|^PASS$$'; exit 1; }; \
	echo "$$out" | grep '^ok'; \
	want=$$(( $$(printf '%s' '$(CHECK_RUN)' | tr -cd '|' | wc -c) + 1 )); \
	got=$$(echo "$$out" | grep -c '^=== RUN   Test[A-Za-z0-9_]*$$'); \
	[ "$$got" = "$$want" ] || { echo "make check: CHECK_RUN names $$want tests and $$got ran: a listed test was renamed, removed or matches twice"; exit 1; }; \
	echo "check: ok ($$got named TiDB-free tests of mixed packages)"

# Benchmarks on the embedded TiDB: laneq's claim path against the naive loop
# (BenchmarkClaimComplete), the MVCC-churn proof (BenchmarkChurn), the
# worker against the per-item floor (BenchmarkThroughputVsFloor) and batch
# enqueue, loads against per-row inserts and with source projections
# (BenchmarkMaterialize400x10, BenchmarkEnqueueLaned20000), and enqueue
# commit to handler start in another process (BenchmarkCrossProcessWakeLatency),
# and Satisfy in a process holding only a Queue to the waiter's handler start
# in a quiet worker process (BenchmarkCrossProcessDependencyWake).
BENCH_FLAGS ?= -benchtime=2000x
.PHONY: bench
bench: tidb ## Claim throughput and churn benchmarks on the embedded TiDB.
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./runtime/controller/ ./runtime/scheduler/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'ClaimComplete' $(BENCH_FLAGS) -timeout 60m ./runtime/workqueue/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'Churn' -benchtime=1x -timeout 30m -v ./runtime/workqueue/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'ThroughputVsFloor' -benchtime=1x -timeout 30m ./runtime/worker/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'CrossProcessWakeLatency' -benchtime=500x -count 3 -timeout 30m ./runtime/worker/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'CrossProcessDependencyWake' -benchtime=200x -count 3 -timeout 30m ./runtime/worker/
	LANEQ_TIDB=embedded $(GO) test -run '^$$' -bench 'Materialize400x10|EnqueueLaned20000' -benchtime=1x -timeout 30m ./runtime/workqueue/

.PHONY: plancheck
plancheck: tidb ## Plan-check the whole query catalog on TiDB and print the report.
	@mode="$${LANEQ_TIDB:-}"; \
	if [ -z "$$mode" ]; then if [ -n "$${LANEQ_TIDB_DSN:-}" ]; then mode=dsn; else mode=embedded; fi; fi; \
	echo "==> plancheck against TiDB from the '$$mode' branch"; \
	LANEQ_TIDB=$$mode $(GO) run ./plancheck/cmd/plancheck $(PLANCHECK_FLAGS)

.PHONY: plancheck-accept
plancheck-accept: tidb ## Record the current plan shapes as the reviewed golden plans.
	LANEQ_TIDB=$${LANEQ_TIDB:-embedded} $(GO) run ./plancheck/cmd/plancheck -accept queries/plancheck.golden.json $(PLANCHECK_FLAGS)

.PHONY: clean
clean: ## Remove bin/ links (the tool cache in $(LANEQ_CACHE) is kept).
	rm -rf bin
