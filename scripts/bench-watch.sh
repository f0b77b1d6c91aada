#!/usr/bin/env bash
# Watch throughput: ctrlkit, kube-runtime 5 and client-go (the client-go module
# CTRLKIT_CLIENT_GO names, built by scripts/peer.sh) on one embedded API server, in one run;
# prints the medians as the README's tables: the live scenario (the writers write while the
# peers watch), then catching up (the writers write while each peer is stopped). See
# benches/watch.rs.
#
#   CTRLKIT_CLIENT_GO=../shared/kube/v1.36.2/client-go scripts/bench-watch.sh [OBJECTS UPDATES RUNS]
#                                                               (defaults 1000 100000 3)
set -euo pipefail
cd "$(dirname "$0")/.."
CTRLKIT_PEER_CLIENT_GO_WATCH=$(scripts/peer.sh watch)
export CTRLKIT_PEER_CLIENT_GO_WATCH
cargo bench --bench watch --features testing -- "$@"
cargo bench --bench watch --features testing -- "$@" catch-up
