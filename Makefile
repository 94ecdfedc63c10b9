# The two commands of the README: `make trace` (the main job) and `make test`.
.PHONY: trace test setup notebook build

# Layer-trace report of the default model, written to strata-trace/.
trace:
	go run ./cmd/strata trace --out strata-trace

# Installs what the tests need (Jupyter, GoNB, lavapipe, glslang), then runs them all.
test:
	./scripts/test.sh

setup:
	./scripts/setup.sh

build:
	go build -o bin/strata ./cmd/strata

# Jupyter with the GoNB kernel on the teaching notebooks. Strata's packages
# are compiled first (in a throwaway module, as a notebook's set-up cell
# does), so that the first cell does not wait minutes; STRATA_DIR lets
# notebooks saved outside the checkout find it.
notebook: setup
	tmp=$$(mktemp -d); (cd $$tmp && go mod init gonb_prime >/dev/null 2>&1 && $(CURDIR)/scripts/gonb-setup); ok=$$?; rm -rf $$tmp; exit $$ok
	STRATA_DIR=$(CURDIR) PATH="$$(go env GOPATH)/bin:$$PATH" jupyter notebook --notebook-dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)
