# sluice: one command builds, vets and tests every module of the workspace.
GO      ?= go
MODULES := $(shell $(GO) list -m -f '{{.Dir}}' 2>/dev/null)
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

.PHONY: test vet fmt race allocs bench demo fuzz

## test: gofmt check, go vet, race-enabled tests of every module, and the
## allocation tests without the race detector (which changes inlining).
test: fmt vet race allocs

fmt:
	@out=$$(gofmt -l $(MODULES) 2>/dev/null | grep -v '/testdata/' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && $(GO) vet ./...); done

race:
	@if [ -z "$(RACE)" ]; then echo "WARNING: no C compiler for the race detector; running tests without -race (install gcc to enable it)"; fi
	@set -e; for m in $(MODULES); do echo "== test $(RACE) $$m"; (cd $$m && $(GO) test $(RACE) -count=1 -timeout 20m ./...); done

allocs:
	@echo "== allocation tests (no -race)"
	@$(GO) test -count=1 -run 'Alloc' ./...

## bench: the hot-path benchmarks (see docs/benchmarks.md for the figures).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 . ./stat/... ./slots/...

## fuzz: a short fuzzing pass over the rule decoders.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./rules

## demo: the quickstart example.
demo:
	$(GO) run ./examples/quickstart
