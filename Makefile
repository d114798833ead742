# The README's test command is `make test`; .ci/run installs the tools it
# needs on a fresh Debian machine and runs it. Each check is a target of its
# own so that it can be run alone.

GO ?= go

.PHONY: test fmt vet gotest python pytest

test: fmt vet gotest python pytest

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

gotest:
	$(GO) test -race -timeout 20m ./...

# The Python package's native library: the Go client and node behind a C
# ABI (python/capi), loaded by python/tierstore with ctypes (docs/python.md).
PYLIB := python/tierstore/_lib/libtierstore.so

python:
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(PYLIB) ./python/capi

# Debian's python3 (with python3-pytest and python3-numpy), not a pyenv one.
PYTHON ?= /usr/bin/python3

pytest: python
	$(PYTHON) -m pytest -q python/tests
