#!/usr/bin/env bash
# The e2e suite against a real kube-apiserver + etcd: starts them (scripts/kube-apiserver.sh:
# the binaries of KUBEBUILDER_ASSETS when it is set, an envtest-style folder of any version;
# else v1.20.2, built once), runs the real-server cases of the protocol suite
# (apiserver/tests/apiserver), of the end-to-end suite (tests/e2e) and, without arguments, of
# the user's crate examples/operator-tests, stops what it started, and ends with the runners'
# summary and the server's version.
#
#   scripts/e2e.sh                                              # v1.20.2, built here
#   KUBEBUILDER_ASSETS=../shared/kube/v1.36.2/bin scripts/e2e.sh  # v1.36.2, as CI runs it
#
# With CTRLKIT_E2E_KUBECONFIG already set, it uses that cluster instead and starts nothing;
# set CTRLKIT_E2E_ETCD too (an etcd client URL) for the cases that compact history, and
# CTRLKIT_E2E_ETCDCTL if the etcdctl for it is not the one on the PATH.
# An argument is the test runner's one name filter (libtest-mimic takes one), run among the
# real-server cases only (`--skip embedded::`); further arguments go to the runner as they are.
set -euo pipefail
if [[ -n ${KUBEBUILDER_ASSETS:-} ]]; then
    KUBEBUILDER_ASSETS=$(cd "$KUBEBUILDER_ASSETS" && pwd)
    export KUBEBUILDER_ASSETS
fi
cd "$(dirname "$0")/.."

started=
stop() {
    if [[ -n $started ]]; then
        scripts/kube-apiserver.sh stop 2>/dev/null || true
    fi
}
trap stop EXIT

if [[ -z ${CTRLKIT_E2E_KUBECONFIG:-} ]]; then
    scripts/kube-apiserver.sh start
    started=yes
    eval "$(scripts/kube-apiserver.sh env)"
fi

# The examples run as processes in two cases: build them first.
cargo build --quiet --all-features --example pods --example configmap_sets
version=$(kubectl --kubeconfig "$CTRLKIT_E2E_KUBECONFIG" version -o json 2>/dev/null |
    sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -n1 || true)
echo "e2e: running the real-server cases on kube-apiserver ${version:-(version unknown)}"
status=0
cargo test --all-features --no-fail-fast --test apiserver --test e2e -- --skip embedded:: "${@:-real::}" 2>&1 | tee /tmp/ctrlkit-e2e.$$.log ||
    status=$?
# A user's crate outside the workspace (examples/operator-tests), on ctrlkit's harness: its
# real-server cases on this server too (its own target folder: another lockfile, other features).
if [[ $# -eq 0 ]]; then
    (cd examples/operator-tests && CARGO_TARGET_DIR=../../target/operator-tests cargo test -- real::) 2>&1 |
        tee -a /tmp/ctrlkit-e2e.$$.log || status=$?
fi
stop
started=
# Only the runners' summary lines count (cases print figures of their own).
count() { grep -E '^test result:' /tmp/ctrlkit-e2e.$$.log | grep -Eo "[0-9]+ $1" | awk '{n += $1} END {print n + 0}'; }
passed=$(count passed)
failed=$(count failed)
skipped=$(count ignored)
rm -f /tmp/ctrlkit-e2e.$$.log
echo
echo "e2e ran on kube-apiserver ${version:-(version unknown)}"
echo "e2e: $passed passed, $failed failed, $skipped skipped"
exit "$status"
