#!/usr/bin/env bash
# Informer sync and memory on a real kube-apiserver (v1.20.2 with etcd, started here unless
# one is running): ctrlkit, ctrlkit metadata-only, kube-runtime 5 and client-go (v1.20.2, from
# the Kubernetes tree scripts/kube-apiserver.sh fetches), alternating, medians of 3; prints
# the README's table. See benches/informer.rs.
#
#   scripts/bench-informer.sh [SIZES...]     (default 10000 30000)
set -euo pipefail
cd "$(dirname "$0")/.."
CTRLKIT_PEER_CLIENT_GO_INFORMER=$(scripts/kube-apiserver.sh peer informer)
export CTRLKIT_PEER_CLIENT_GO_INFORMER
if ! scripts/kube-apiserver.sh env >/dev/null 2>&1; then
    scripts/kube-apiserver.sh start
    trap 'scripts/kube-apiserver.sh stop' EXIT
fi
eval "$(scripts/kube-apiserver.sh env)"
CTRLKIT_BENCH_KUBECONFIG=$CTRLKIT_E2E_KUBECONFIG cargo bench --bench informer --features testing -- "$@"
