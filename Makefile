# softrdma: soft-RoCE and soft-iWARP in user space.
GO       ?= go
BIN      := bin/softrdma
# Engine packages run under the race detector.
RACEPKGS := ./ibtransport/... ./roce/... ./iwarp/... ./netio/... ./sim/... ./rdmacm/... ./conform/... ./test ./cmd/softrdma ./perf ./bench ./device ./pingpong ./rping
export CGO_ENABLED ?= 0
# COMMIT is what softrdma version reports when the toolchain stamped no
# vcs.revision (GOFLAGS=-buildvcs=false): HEAD, +dirty with uncommitted changes.
COMMIT   := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null; [ $$? -eq 1 ] && echo +dirty)
# staticcheck, pinned: go run fetches and builds this version once (the
# module proxy serves it) and runs it from the build cache after that.
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build lib lib-build lib-deps conform-ctl conform-ctl-build demo test test-interop test-rest vet staticcheck fmt-check unit race fuzz-short fuzz bench bench-go bench-kernel deps clean interop

all: build

# build makes bin/softrdma (pure Go) and, when gcc and rdma-core's headers are
# there, lib/ as make lib does (without installing anything: make lib does);
# without them one line says so and the binary is built all the same.
build:
	$(GO) build -ldflags "-X main.buildCommit=$(COMMIT)" -o $(BIN) ./cmd/softrdma
	@if command -v gcc >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ]; then \
		$(MAKE) --no-print-directory lib-build conform-ctl-build; \
	else echo "build: lib/ and bin/conform-ctl not built: they need gcc and libibverbs-dev (make lib installs them)"; fi

# lib/libibverbs.so.1: the drop-in libibverbs (capi/libibverbs, cgo, built
# against rdma-core's headers, which lib-deps installs, as libsoftrdma-verbs.so,
# loaded at the first verb by the C shim libibverbs.so.1, capi/shim: a program
# may fork before it opens a device), libmlx5.so.1 and libefa.so.1 stubs
# (capi/vendorstubs) that perftest links, and the drop-in librdmacm.so.1
# (capi/librdmacm: C over the rdma_cm engine in the Go library, reached through
# libibverbs.so.1's private node SOFTRDMA_CM_PRIVATE: one Go runtime per
# process). Unmodified verbs
# programs run on softrdma with LD_LIBRARY_PATH=lib SOFTRDMA_DEVICES=SPEC...
# (devspec). The softrdma binary and every other package stay CGO_ENABLED=0.
# LIBDIR puts it elsewhere (the tests build into a temporary directory).
LIBDIR ?= lib
LIBMAP := $(CURDIR)/capi/libibverbs/libibverbs.map
# LIBVERSION: the build SOFTRDMA_DEBUG's first line names (GOFLAGS may turn off Go's VCS stamp).
LIBVERSION ?= $(shell git describe --always --dirty 2>/dev/null)
lib: lib-deps
	@$(MAKE) --no-print-directory lib-build

lib-build:
	mkdir -p $(LIBDIR)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath \
		-ldflags "-X main.libVersion=$(LIBVERSION) -extldflags '-Wl,--version-script=$(LIBMAP) -Wl,-soname,libsoftrdma-verbs.so -Wl,-Bsymbolic'" \
		-o $(LIBDIR)/libsoftrdma-verbs.so ./capi/libibverbs
	rm -f $(LIBDIR)/libsoftrdma-verbs.h
	$(GO) run ./capi/shim/genshim $(LIBDIR)/libsoftrdma-verbs.so $(LIBDIR)/shim.S
	sed '/local: \*;/d' $(LIBMAP) > $(LIBDIR)/shim.map
	gcc -shared -fPIC -O2 -Wall -Wl,--version-script=$(LIBDIR)/shim.map -Wl,-soname,libibverbs.so.1 \
		-o $(LIBDIR)/libibverbs.so.1 capi/shim/shim.c capi/shim/sig.c $(LIBDIR)/shim.S -ldl -lpthread
	rm -f $(LIBDIR)/shim.S $(LIBDIR)/shim.map
	gcc -shared -fPIC -O2 -Wall -Wl,--version-script=capi/vendorstubs/mlx5.map -Wl,-soname,libmlx5.so.1 \
		-o $(LIBDIR)/libmlx5.so.1 capi/vendorstubs/mlx5.c
	gcc -shared -fPIC -O2 -Wall -Wl,--version-script=capi/vendorstubs/efa.map -Wl,-soname,libefa.so.1 \
		-o $(LIBDIR)/libefa.so.1 capi/vendorstubs/efa.c
	gcc -shared -fPIC -O2 -Wall -Wl,--version-script=capi/librdmacm/librdmacm.map -Wl,-soname,librdmacm.so.1 \
		-o $(LIBDIR)/librdmacm.so.1 capi/librdmacm/rdmacm.c capi/librdmacm/rsocket.c capi/librdmacm/stubs.c $(LIBDIR)/libibverbs.so.1 -lpthread

lib-deps:
	@./scripts/deps.sh lib

# bin/conform-ctl: the conformance control protocol (conform/CONTROL.md) served
# for any libibverbs device (capi/conformctl, plain C against rdma-core's
# libibverbs), so that softrdma conform --peer runs the cases that need a side
# channel against a hardware RNIC, the kernel's rxe, or softrdma's own lib/
# (softrdma run -- bin/conform-ctl ...). CTLDIR puts it elsewhere, CTLCFLAGS
# adds compiler flags (the hostile-input test adds the sanitizers).
CTLDIR ?= bin
CTLCFLAGS ?=
conform-ctl: lib-deps
	@$(MAKE) --no-print-directory conform-ctl-build

conform-ctl-build:
	mkdir -p $(CTLDIR)
	gcc -O2 -g -Wall -Wextra -Wno-unused-parameter $(CTLCFLAGS) -o $(CTLDIR)/conform-ctl \
		capi/conformctl/conform-ctl.c capi/conformctl/json.c -lrdmacm -libverbs

demo: build
	./$(BIN) demo

deps:
	./scripts/deps.sh
	$(STATICCHECK) -version >/dev/null

test: deps vet staticcheck fmt-check
	$(MAKE) --no-print-directory -j2 --output-sync=target test-interop test-rest

# make test's two halves, side by side: the interop tests (kernel guests under
# emulation: about 18 minutes, mostly on one CPU, 44 on a loaded 2-CPU host, so
# the same 90-minute bound as make interop; they skip without root) and
# the rest, which is unit, race and fuzz-short without them. Each half's
# output comes out whole when it ends.
test-interop:
	$(GO) test -count=1 -timeout 90m ./test/interop/...

test-rest:
	$(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/test/interop$$')
	$(MAKE) --no-print-directory race fuzz-short

vet:
	$(GO) vet ./...
	CGO_ENABLED=1 $(GO) vet ./capi/...

# staticcheck's default checks over every package; perf, bench, pingpong and rping have a
# staticcheck.conf saying why ST1005 is off there.
# Twice: the softrdma binary and the Go packages build with CGO_ENABLED=0, where the
# cgo-only files drop out; the C-ABI libraries need cgo.
staticcheck:
	CGO_ENABLED=1 $(STATICCHECK) ./...
	CGO_ENABLED=0 $(STATICCHECK) ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -count=1 -timeout 40m ./...

race:
	CGO_ENABLED=1 $(GO) test -race -count=1 $(RACEPKGS)

fuzz-short:
	FUZZTIME=3s ./scripts/fuzz.sh

fuzz:
	FUZZTIME=$${FUZZTIME:-60s} ./scripts/fuzz.sh

# The benchmark suite: softrdma against the raw path (UDP blaster, TCP stream)
# between two network namespaces it creates; one table (BENCHFLAGS=--json for
# JSON). Needs root; without it, one line says so and it succeeds. The
# bandwidth rows run at each of BENCHMTU (IB MTU 1024 and 4096), the rest at
# the first. The clib rows run perftest on lib/ (make lib: without gcc or
# rdma-core's headers it fails, and those rows say the library is missing)
# beside softrdma perf, between 127.0.0.1 and 127.0.0.2.
BENCHMTU ?= 1500,9000
bench: build
	@$(MAKE) -s lib || echo "make bench: make lib failed: the clib rows will not be measured"
	./$(BIN) bench --mtu $(BENCHMTU) $(BENCHFLAGS)

# The Go benchmarks (go test -bench), allocations reported.
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# softrdma perf against perftest over the kernel's rxe and siw inside one
# guest of the interop harness (the project's interop/, else ../shared/interop),
# same sizes and iterations, then across the link between two guests; prints
# softrdma/rxe and softrdma/siw. Skips (one line) without the harness.
bench-kernel:
	./scripts/bench-kernel.sh

# The interop suite against the kernel's rxe and siw: interop/setup (packages,
# the stock Debian kernel, siw built out of tree, the guest image; ~1 min cold),
# then test/interop with the project's harness. Needs root: `sudo make interop`.
# INTEROPFLAGS adds go test flags (e.g. INTEROPFLAGS='-run TestOwnHarness').
interop:
	./interop/setup
	SOFTRDMA_INTEROP_HARNESS=$(CURDIR)/interop $(GO) test -count=1 -v -timeout 90m $(INTEROPFLAGS) ./test/interop/...

clean:
	rm -rf bin lib
