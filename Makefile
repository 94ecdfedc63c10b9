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
# notebooks saved outside the checkout find it. The notebooks are trusted
# (their saved figures show, with no "Not Trusted"), and the tree hides
# the Go test files beside them. ARGS goes to Jupyter as it is: a class
# reaches the server with make notebook ARGS=--ip=0.0.0.0 (then give the
# URL with its token, which Jupyter prints, to the class).
ARGS ?=
NOTEBOOK_HIDDEN := ['__pycache__', '*.pyc', '*.pyo', '.DS_Store', '*~', '*_test.go']
notebook: setup
	tmp=$$(mktemp -d); (cd $$tmp && go mod init gonb_prime >/dev/null 2>&1 && $(CURDIR)/scripts/gonb-setup); ok=$$?; rm -rf $$tmp; exit $$ok
	# jupyter trust, or nbformat's signer run by Jupyter's own Python where
	# the command is missing (Debian's packages lack it)
	jupyter trust notebooks/*.ipynb 2>/dev/null || "$$(sed -n '1s/^#!//p' "$$(command -v jupyter)")" -m nbformat.sign notebooks/*.ipynb
	STRATA_DIR=$(CURDIR) PATH="$$(go env GOPATH)/bin:$$PATH" jupyter notebook --notebook-dir=notebooks \
		--ContentsManager.hide_globs="$(NOTEBOOK_HIDDEN)" $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(ARGS)
