#!/usr/bin/env bash
# Informer sync and memory on a real kube-apiserver with etcd (scripts/kube-apiserver.sh's:
# the binaries of KUBEBUILDER_ASSETS, else v1.20.2; started here unless one is running): every
# ctrlkit shape, kube-runtime 5 and client-go (the client-go module CTRLKIT_CLIENT_GO names,
# by default the one beside KUBEBUILDER_ASSETS; built by scripts/peer.sh), alternating,
# medians of 5 (CTRLKIT_BENCH_RUNS); prints the informer page's table, each client-go row
# with the wire format it reads (its generated informer on protobuf, its default for pods,
# and forced to JSON, ctrlkit's format) and the floors on JSON and protobuf, with the API
# server's own CPU during each peer's run (its process's, named by the pid file
# scripts/kube-apiserver.sh writes beside the kubeconfig). CTRLKIT_BENCH_PEERS=a,b runs those
# peers alone. The load average is printed before and after (the figures are only as quiet
# as the machine). See benches/informer.rs.
#
#   KUBEBUILDER_ASSETS=../shared/kube/v1.36.2/bin scripts/bench-informer.sh [SIZES...]
#                                                               (default 10000 30000)
set -euo pipefail
cd "$(dirname "$0")/.."
CTRLKIT_PEER_CLIENT_GO_INFORMER=$(scripts/peer.sh informer)
export CTRLKIT_PEER_CLIENT_GO_INFORMER
if ! scripts/kube-apiserver.sh env >/dev/null 2>&1; then
    scripts/kube-apiserver.sh start
    trap 'scripts/kube-apiserver.sh stop' EXIT
fi
eval "$(scripts/kube-apiserver.sh env)"
# The server's run folder holds its kubeconfig and its pid file.
CTRLKIT_BENCH_APISERVER_PID=$(cat "$(dirname "$CTRLKIT_E2E_KUBECONFIG")/kube-apiserver.pid")
export CTRLKIT_BENCH_APISERVER_PID
cargo bench --bench informer --features testing --no-run
echo "load before: $(uptime)"
CTRLKIT_BENCH_KUBECONFIG=$CTRLKIT_E2E_KUBECONFIG cargo bench --bench informer --features testing -- "$@"
echo "load after: $(uptime)"
