#!/usr/bin/env bash
# Watch throughput: ctrlkit, kube-runtime 5 and client-go (v1.20.2, from the Kubernetes tree
# that scripts/kube-apiserver.sh fetches) on one embedded API server, in one run; prints the
# medians as the README's tables: the live scenario (the writers write while the peers watch),
# then catching up (the writers write while each peer is stopped). See benches/watch.rs.
#
#   scripts/bench-watch.sh [OBJECTS UPDATES RUNS]     (defaults 1000 100000 3)
set -euo pipefail
cd "$(dirname "$0")/.."
CTRLKIT_PEER_CLIENT_GO_WATCH=$(scripts/kube-apiserver.sh peer watch)
export CTRLKIT_PEER_CLIENT_GO_WATCH
cargo bench --bench watch --features testing -- "$@"
cargo bench --bench watch --features testing -- "$@" catch-up
