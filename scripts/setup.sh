#!/usr/bin/env bash
# Installs what Strata's tests and notebooks need on Debian: Jupyter from
# Debian packages, GoNB with goimports and gopls, Mesa's lavapipe Vulkan
# driver with the validation layer and the registry headers (the generated
# bindings are checked against them), glslang-tools, spirv-cross (the
# portable shaders must translate to Metal), numpy (to check traces
# load in Python), Chromium with the Liberation fonts that figures name (to
# check the report and the notebooks render as exported). Safe to
# run again: it skips what is there.
set -euo pipefail

packages=(
	jupyter-notebook jupyter-nbconvert python3-nbclient python3-ipykernel jupyter-client
	mesa-vulkan-drivers libvulkan1 libvulkan-dev vulkan-validationlayers vulkan-tools glslang-tools spirv-cross
	python3-numpy chromium fonts-liberation
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "setup: installing ${missing[*]}"
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# GoNB and its helpers. The module proxy can refuse `go install pkg@version`
# (403 on the version list), so each is required in a throwaway module first.
gobin="$(go env GOPATH)/bin"
export PATH="$gobin:$PATH"
install_tool() { # module version package binary
	[ -x "$gobin/$4" ] && return 0
	echo "setup: installing $3@$2"
	tmp=$(mktemp -d)
	(cd "$tmp" && go mod init tools >/dev/null 2>&1 &&
		go mod edit -require="$1@$2" &&
		GOFLAGS=-mod=mod go install "$3")
	rm -rf "$tmp"
}
install_tool github.com/janpfeifer/gonb v0.11.3 github.com/janpfeifer/gonb gonb
install_tool golang.org/x/tools v0.41.0 golang.org/x/tools/cmd/goimports goimports
install_tool golang.org/x/tools/gopls v0.21.0 golang.org/x/tools/gopls gopls
if ! jupyter kernelspec list 2>/dev/null | grep -q gonb; then
	gonb --install
fi
echo "setup: done"
