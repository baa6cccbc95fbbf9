# graphpipe: make demo runs the main job, make test runs the tests.
GO        ?= go
BIN       := bin/graphpipe
FUZZTIME  ?= 60s
DEMO      := out/demo

.PHONY: build test demo fuzz bench lint clean

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/graphpipe

# Unit tests, then a few seconds of each fuzz target (the long runs are make fuzz).
test:
	$(GO) test ./...
	$(GO) test ./dag -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 5s

# Until the runtime exists the demo exports a paper model and inspects it.
demo: build
	@mkdir -p $(DEMO)
	$(BIN) models list
	$(BIN) models export mmt -o $(DEMO)/mmt.json
	$(BIN) validate $(DEMO)/mmt.json
	$(BIN) inspect $(DEMO)/mmt.json
	$(BIN) models export dlrm --preset small -o $(DEMO)/dlrm-small.json
	$(BIN) inspect $(DEMO)/dlrm-small.json

fuzz:
	$(GO) test ./dag -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)

bench:
	$(GO) test ./... -run '^$$' -bench . -benchmem

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin out
