#!/usr/bin/env bash
# The e2e suite against a real kube-apiserver + etcd: builds and starts them
# (scripts/kube-apiserver.sh), runs the real-server cases of the protocol suite
# (tests/apiserver) and of the end-to-end suite (tests/e2e), stops what it started, and ends
# with the runner's summary.
#
# With CTRLKIT_E2E_KUBECONFIG already set, it uses that cluster instead and starts nothing;
# set CTRLKIT_E2E_ETCD too (an etcd client URL) for the cases that compact history.
# Arguments are passed to the test runner, after the `real::` filter.
set -euo pipefail
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
status=0
cargo test --all-features --no-fail-fast --test apiserver --test e2e -- real:: "$@" 2>&1 | tee /tmp/ctrlkit-e2e.$$.log ||
    status=$?
stop
started=
# Only the runners' summary lines count (cases print figures of their own).
count() { grep -E '^test result:' /tmp/ctrlkit-e2e.$$.log | grep -Eo "[0-9]+ $1" | awk '{n += $1} END {print n + 0}'; }
passed=$(count passed)
failed=$(count failed)
skipped=$(count ignored)
rm -f /tmp/ctrlkit-e2e.$$.log
echo
echo "e2e: $passed passed, $failed failed, $skipped skipped"
exit "$status"
