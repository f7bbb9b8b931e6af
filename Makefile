# sluice: one command builds, vets and tests every module of the repository.
GO      ?= go
# Every module of the repository: each folder with a go.mod (testdata and
# hidden folders excluded), found on disk so a new module is covered without
# editing this file. "." is the root module.
MODULES := $(sort $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path "*/testdata/*" -not -path "*/.*/*")))
# The race detector needs cgo and a C compiler. CI always uses it (and fails
# if it cannot); elsewhere the tests run without it when the toolchain lacks it.
CANRACE := $(shell [ "$$($(GO) env CGO_ENABLED)" = "1" ] && command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo yes)
ifeq ($(CI),true)
RACE := -race
else ifeq ($(CANRACE),yes)
RACE := -race
else
RACE :=
endif

.PHONY: test check short complexity simulations standalone-compile fmt shared tidy workspace vet lint race allocs standalone consumer release release-tags bench bench-compare bench-cluster demo fuzz fuzz-ci conformance rls-differential

# Rounds of make bench-compare.
BENCH_COUNT ?= 5

## test: every check, stage by stage, each stage's time printed, then the
## total: gofmt, the module boundaries (shared), tidy modules, the
## workspace, go vet and staticcheck and the complexity check of every
## module, race-enabled tests of every module (TEST_P packages at a time;
## the single-goroutine simulations of the adaptive limiter without it), the
## allocation tests without the race detector (which changes inlining),
## every module built and vetted with its tests on its own (GOWORK=off, the
## commands and tests type-checked by go vet, not linked or run: make standalone runs them), a module outside the
## repository that requires the published ones (consumer), and a short
## fuzzing pass over every fuzz target (fuzz-ci). The conformance tests run
## at their default steps; make conformance runs them 20 times longer.
## The TEST_BESIDE stages run beside the TEST_AFTER ones (from vet on), one after
## another, their output printed once the
## race stage and those after it are done: most of the race stage's time is
## its packages waiting on servers, browsers and timers (the dashboard's
## tests: 96 CPU-seconds in 283 s), while the cores are idle.
TEST_STAGES := fmt shared tidy workspace
TEST_AFTER := vet lint race simulations allocs
TEST_BESIDE := standalone-compile consumer fuzz-ci
# Every module's packages, for one go command over the workspace: it loads
# what the modules share once, and runs the packages of all modules
# together, TEST_P at a time (builds and test binaries): more than the two
# cores, as tests spend much of their time waiting on servers, browsers
# and timers.
PKGS := $(addsuffix /...,$(MODULES))
TEST_P ?= 4
# Each stage's line gives its wall time and the CPU time (user and system)
# of its processes, waited for: what it costs the cores besides how long it
# took (the shell's times builtin, before and after).
test:
	@t0=$$(date +%s); tf=$$(mktemp); cpu() { awk 'NR == 2 { split($$1, u, /[ms]/); split($$2, s, /[ms]/); printf "%d\n", u[1]*60 + u[2] + s[1]*60 + s[2] + 0.5 }' $$tf; }; \
	stage() { t=$$(date +%s); times >$$tf; c=$$(cpu); \
		if ! $(MAKE) --no-print-directory $$1; then echo "== stage $$1 FAILED after $$(( $$(date +%s) - t ))s"; return 1; fi; \
		times >$$tf; echo "== stage $$1: $$(( $$(date +%s) - t ))s (CPU $$(( $$(cpu) - c ))s)"; }; \
	for s in $(TEST_STAGES); do stage $$s || exit 1; done; \
	beside=$$(mktemp); echo "== stages $(TEST_BESIDE) started beside $(TEST_AFTER) (output below, after them)"; \
	( tf=$$tf.beside; for s in $(TEST_BESIDE); do stage $$s || { rm -f $$tf; exit 1; }; done; rm -f $$tf ) </dev/null >$$beside 2>&1 & pid=$$!; \
	ok=yes; for s in $(TEST_AFTER); do stage $$s || { ok=; break; }; done; \
	if ! wait $$pid; then ok=; fi; times >$$tf; c=$$(cpu); rm -f $$tf; echo "== output of $(TEST_BESIDE):"; cat $$beside; rm -f $$beside; \
	if [ -z "$$ok" ]; then echo "== make test FAILED after $$(( $$(date +%s) - t0 ))s"; exit 1; fi; \
	echo "== make test: $$(( $$(date +%s) - t0 ))s (CPU $${c}s)"

## check: the everyday loop (under 2 minutes): gofmt, the module
## boundaries, go vet of every module, the complexity check, and the root
## module's tests in -short mode (no race detector, no other module, no
## doccheck).
check:
	@t0=$$(date +%s); for s in fmt shared vet complexity short; do t=$$(date +%s); \
		if ! $(MAKE) --no-print-directory $$s; then echo "== stage $$s FAILED"; exit 1; fi; \
		echo "== stage $$s: $$(( $$(date +%s) - t ))s"; done; \
	echo "== make check: $$(( $$(date +%s) - t0 ))s"

# internal/doccheck, which builds every code block of the docs (about 3
# minutes of a loaded run), is left to make test.
short:
	@$(GO) test -short -count=1 $$($(GO) list ./... | grep -v -x -F -e github.com/sluice-go/sluice/internal/doccheck)

fmt:
	@out=$$(gofmt -l $(MODULES) 2>/dev/null | grep -v '/testdata/' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The module checks serve the working tree's modules, at the version their
# go.mod files require, from a file-based module proxy in a temporary folder
# (docs/releasing.md).
MODULES_CMD := GO=$(GO) $(GO) run ./internal/cmd/modules

## shared: no module imports another module's internal package, and the
## generated copies of the root module's internal files in other modules
## equal their source (docs/design/architecture.md, "Code shared between
## modules"; go run ./internal/cmd/modules copies -w rewrites them).
shared:
	@$(MODULES_CMD) internal
	@$(MODULES_CMD) copies

## tidy: every module's go.mod and go.sum are what `go mod tidy` makes them
## (go.sum less the lines of the repository's own modules, whose checksums
## exist once they are tagged).
tidy:
	@$(MODULES_CMD) tidy

## workspace: go.work uses every module, and its go.work.sum is complete
## (resolving the workspace's module graph does not rewrite it).
workspace:
	@set -e; used=$$($(GO) list -m -f '{{.Dir}}'); \
	for m in $(MODULES); do d=$$(cd $$m && pwd -P); \
		if ! printf '%s\n' "$$used" | grep -qxF "$$d"; then \
			echo "$$m has a go.mod but go.work does not use it; run: $(GO) work use $$m"; exit 1; fi; done
	@cp go.work.sum go.work.sum.orig; $(GO) list -m all >/dev/null; \
	if cmp -s go.work.sum go.work.sum.orig; then rm -f go.work.sum.orig; else \
		diff go.work.sum.orig go.work.sum || true; mv go.work.sum.orig go.work.sum; \
		echo "go.work.sum is incomplete; run: $(GO) list -m all, and commit go.work.sum"; exit 1; fi

## lint: staticcheck (pinned) on every module, and no library function
## above complexity 15 (gocyclo's measure) without a "// complexity:
## <reason>" line in its doc comment (internal/cmd/complexity).
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: complexity
	@$(STATICCHECK) $(PKGS)
complexity:
	@$(GO) run ./internal/cmd/complexity .

vet:
	@$(GO) vet $(PKGS)

# The packages whose tests take longest (browser and Redis tests: 283, 187
# and 149 s of a 406 s race stage on 2026-12-02), listed first so that go
# test starts them first instead of after the packages sorted before them.
SLOWEST := github.com/sluice-go/sluice/dashboard github.com/sluice-go/sluice/cluster/redis github.com/sluice-go/sluice/cluster/sqlstore github.com/sluice-go/sluice/examples/benchcompare
# The dashboard's browser tests (TestBrowser*, each driving a headless
# Chromium) run in a go test of their own beside the rest, BROWSER_P at a
# time (the tests hold at most 4 Chromiums at once whatever it is): one
# after another they took 472 s of a 496 s race stage on 2026-12-02, the
# stage's longest path, most of it waiting on the browser.
BROWSER_TESTS := ^TestBrowser
BROWSER_P ?= 1
race:
	@if [ -z "$(RACE)" ]; then echo "WARNING: no C compiler for the race detector; running tests without -race (install gcc to enable it)"; fi
	@pkgs=$$(printf '%s\n' $(SLOWEST); $(GO) list $(PKGS) | grep -v -x -F $(addprefix -e ,$(SIMULATIONS) $(SLOWEST))) && \
	out=$$(mktemp) && { $(GO) test $(RACE) -count=1 -timeout 20m -parallel $(BROWSER_P) -run '$(BROWSER_TESTS)' github.com/sluice-go/sluice/dashboard >$$out 2>&1 & pid=$$!; } && \
	ok=yes; $(GO) test $(RACE) -p $(TEST_P) -count=1 -timeout 20m -skip '$(BROWSER_TESTS)' $$pkgs || ok=; \
	wait $$pid || ok=; echo "== the dashboard's browser tests:"; cat $$out; rm -f $$out; [ -n "$$ok" ]

# The adaptive limiter's tests and its example run one goroutine on a
# simulated clock: the race detector has nothing to find in them and makes
# them several times slower (its conformance simulations took 349, 182 and
# 146 s and the example 295 s of one loaded -race run), so they run without
# it, in a stage of their own.
SIMULATIONS := github.com/sluice-go/sluice/internal/adaptive github.com/sluice-go/sluice/examples/adaptive
simulations:
	@$(GO) test -count=1 $(SIMULATIONS)

# The allocation tests (every Test, Example or Fuzz of the root module whose
# name has "Alloc" in it), in the packages that have one: go test -run of
# every package linked 42 test binaries (all the root module's) to run those of 5.
allocs:
	@echo "== allocation tests and memory bounds at full size (no -race)"
	@pkgs=$$($(GO) list -f '{{.Dir}}' ./... | while read -r d; do \
		if grep -qE '^func (Test|Example|Fuzz)[A-Za-z0-9_]*Alloc' "$$d"/*_test.go 2>/dev/null; then echo "$$d"; fi; done) && \
	$(GO) test -count=1 -run 'Alloc|MemoryBound' $$pkgs

## standalone: each module on its own, without the workspace: what a program
## that requires it builds (the sibling modules it requires come from the
## local proxy).
standalone:
	@$(MODULES_CMD) standalone
standalone-compile:
	@$(MODULES_CMD) standalone -compile

## consumer: a module in a temporary folder outside the repository gets every
## published module through the local proxy (go get), as a user would, and
## runs a program using each, then the adapters' examples by module path;
## fails if a published go.mod replaces anything or requires what cannot be
## resolved.
consumer:
	@$(MODULES_CMD) consumer

## release: make release VERSION=vX.Y.Z sets every requirement between the
## repository's modules (and go.work's replaces) to VERSION and tidies them;
## release-tags then tags HEAD, the root first (docs/releasing.md).
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 1; }
	@$(MODULES_CMD) release $(VERSION)
release-tags:
	@test -n "$(VERSION)" || { echo "usage: make release-tags VERSION=vX.Y.Z"; exit 1; }
	@$(MODULES_CMD) tags -create $(VERSION)

## bench: the hot-path benchmarks (see docs/design/benchmarks.md for the figures).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 . ./internal/...

## bench-compare: sluice beside x/time/rate, uber ratelimit,
## sentinel-golang and failsafe-go, every path measured in each of BENCH_COUNT rounds; prints
## medians with min-max and the same-run ratios (docs/design/benchmarks.md).
bench-compare:
	cd examples/benchcompare && $(GO) run . -count $(BENCH_COUNT)

## bench-cluster: cluster limits through a redis-server the benchmark starts
## (needs redis-server on PATH): sluice's leases and strict mode beside
## go-redis/redis_rate Allow at 1, 2 and 64 goroutines, BENCH_COUNT
## interleaved rounds (each round runs every benchmark once, in a fixed
## order), with ns/op and the µs Redis spent per decision; summarised by
## benchstat when it is installed (docs/design/benchmarks.md, "Cluster").
bench-cluster:
	@out=$$(mktemp); bin=$$(mktemp); echo "running $(BENCH_COUNT) interleaved rounds (a few minutes)"; \
	if ! (cd examples/benchcompare && $(GO) test -c -o $$bin .) >$$out 2>&1; then cat $$out; rm -f $$out $$bin; exit 1; fi; \
	for r in $$(seq $(BENCH_COUNT)); do \
		if ! (cd examples/benchcompare && $$bin -test.run '^$$' -test.bench '^BenchmarkCluster$$' -test.benchmem -test.count 1) >>$$out 2>&1; then \
			cat $$out; rm -f $$out $$bin; exit 1; fi; \
	done; rm -f $$bin; \
	cat $$out; \
	if command -v benchstat >/dev/null 2>&1; then benchstat $$out; \
	elif [ -x "$$HOME/go/bin/benchstat" ]; then "$$HOME/go/bin/benchstat" $$out; \
	else echo "(install benchstat for medians: go install golang.org/x/perf/cmd/benchstat@latest)"; fi; \
	rm -f $$out

## conformance: the differential tests against x/time/rate and the reference
## models (TestConformance*) at SLUICE_CONFORMANCE_SCALE times their default
## number of steps (docs/design/conformance.md).
CONFORMANCE_SCALE ?= 20
conformance:
	SLUICE_CONFORMANCE_SCALE=$(CONFORMANCE_SCALE) $(GO) test -count=1 -timeout 30m -run 'TestConformance' ./...

## fuzz: every fuzz target, FUZZTIME each (go test runs their seed corpora
## as plain tests): the rule decoder, the Encode/Decode round trip, Validate,
## and the argument extraction of the adapters. fuzz-ci, part of make
## test, fuzzes the root module's targets and sluice-rls's config reader
## for FUZZTIME_CI each; the chi, echo, fiber and connect adapters' targets
## (the same extraction code as sluicehttp's, behind each framework's
## request type) are left to make fuzz: on a cold build cache fuzz-ci
## took 676 s of both cores (2026-12-02), most of it building
## fuzz-instrumented binaries, four of them each with a framework, for 27 s
## of fuzzing; their seed corpora still run in the race stage.
FUZZ_TARGETS_CI := ./rules:FuzzDecode ./rules:FuzzRoundTrip ./rules:FuzzValidate ./adapters/http:FuzzArgs ./rls/config:FuzzParse
FUZZ_TARGETS := $(FUZZ_TARGETS_CI) ./adapters/chi:FuzzArgs ./adapters/echo:FuzzArgs ./adapters/fiber:FuzzArgs ./adapters/connect:FuzzArgs
FUZZTIME ?= 60s
FUZZTIME_CI ?= 3s
## (.ci/fuzz runs one, and runs it again when go1.26's fuzz coordinator
## fails at the deadline without a failing input, golang/go#75804.)
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do GO=$(GO) bash .ci/fuzz $${t%%:*} $${t#*:} $(FUZZTIME); done
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_CI) FUZZ_TARGETS='$(FUZZ_TARGETS_CI)'

## rls-differential: sluice-rls against envoyproxy/ratelimit itself, built
## from the module proxy (minutes), on one redis-server: the same request
## sequences must get the same answers, then the same load goes to each
## (docs/rls.md). Needs redis-server.
rls-differential:
	SLUICE_RLS_DIFFERENTIAL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestDifferential' ./rls

## demo: the quickstart example.
demo:
	$(GO) run ./examples/quickstart
