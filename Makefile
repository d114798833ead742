# The README's test command is `make test`; .ci/run installs the tools it
# needs on a fresh Debian machine and runs it. Each check is a target of its
# own so that it can be run alone.

GO ?= go
PROTO_GO := master.pb.go master_grpc.pb.go node.pb.go node_grpc.pb.go

.PHONY: test fmt vet staticcheck protocheck proto gotest python pytest

test: fmt vet staticcheck protocheck gotest python pytest

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck is pinned as a tool line in go.mod (honnef.co/go/tools).
staticcheck:
	$(GO) tool staticcheck ./...

# proto regenerates internal/rpcpb from its .proto files.
proto:
	internal/rpcpb/protogen.sh .

# protocheck fails when the generated code in internal/rpcpb is not what its
# .proto files generate (protoc from Debian's protobuf-compiler, plugins
# pinned as tool lines in go.mod).
protocheck:
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	internal/rpcpb/protogen.sh "$$tmp" && \
	for f in $(PROTO_GO); do \
		diff -u internal/rpcpb/$$f "$$tmp/$$f" || { echo "internal/rpcpb/$$f is out of sync with its .proto: run make proto"; exit 1; }; \
	done

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
