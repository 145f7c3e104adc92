# softrdma: soft-RoCE and soft-iWARP in user space.
GO       ?= go
BIN      := bin/softrdma
# Engine packages run under the race detector.
RACEPKGS := ./ibtransport/... ./roce/... ./iwarp/... ./netio/... ./sim/... ./rdmacm/... ./conform/... ./test
export CGO_ENABLED ?= 0

.PHONY: all build demo test vet fmt-check unit race fuzz-short fuzz bench deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/softrdma

demo: build
	./$(BIN) demo

deps:
	./scripts/deps.sh

test: deps vet fmt-check unit race fuzz-short

vet:
	$(GO) vet ./...

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

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

clean:
	rm -rf bin
