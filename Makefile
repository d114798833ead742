# The README's test command is `make test`; .ci/run installs the tools it
# needs on a fresh Debian machine and runs it. Each check is a target of its
# own so that it can be run alone.

GO ?= go

.PHONY: test fmt vet gotest

test: fmt vet gotest

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

gotest:
	$(GO) test -race -timeout 20m ./...
