#!/usr/bin/env bash
# Compares two builds of benches/informer.rs, one built before a change and one after, on one
# real kube-apiserver (scripts/kube-apiserver.sh's; started here unless one is running): ROUNDS
# rounds, each running BEFORE then AFTER once (CTRLKIT_BENCH_RUNS=1) for the peers PEERS
# (comma-separated, as CTRLKIT_BENCH_PEERS) at PODS pods. Prints every measurement, then per
# build and peer the median of each column. Used as a guard: a change that only moves code
# should leave the medians within their run-to-run spread.
#
#   cargo bench --bench informer --features testing --no-run   # before; copy it to BEFORE
#   cargo bench --bench informer --features testing --no-run   # after; copy it to AFTER
#   KUBEBUILDER_ASSETS=../shared/kube/v1.36.2/bin \
#       scripts/bench-informer-ab.sh BEFORE AFTER ROUNDS PODS PEERS
set -euo pipefail
[[ $# -eq 5 ]] || { echo "usage: $0 BEFORE AFTER ROUNDS PODS PEERS" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2") rounds=$3 pods=$4 peers=$5
cd "$(dirname "$0")/.."
if ! scripts/kube-apiserver.sh env >/dev/null 2>&1; then
    scripts/kube-apiserver.sh start
    trap 'scripts/kube-apiserver.sh stop' EXIT
fi
eval "$(scripts/kube-apiserver.sh env)"
export CTRLKIT_BENCH_KUBECONFIG=$CTRLKIT_E2E_KUBECONFIG CTRLKIT_BENCH_RUNS=1
export CTRLKIT_BENCH_PEERS=$peers
lines=""
for ((i = 0; i < rounds; i++)); do
    for build in before after; do
        bin=$before
        [[ $build == after ]] && bin=$after
        # The child lines read "N pods, run 0, PEER: sync S s, all reconciled A s, CPU C s,
        # peak P MiB, settled R MiB".
        while IFS= read -r line; do
            echo "$build $line"
            lines+="$build $line"$'\n'
        done < <("$bin" "$pods" 2>&1 >/dev/null | grep ' pods, run ')
    done
done
echo
echo "medians of $rounds rounds, $pods pods (sync s, all reconciled s, CPU s, peak MiB, settled MiB):"
printf '%s' "$lines" | tr -d ',:' | awk '
    { key = $1 " " $6; n[key]++
      sync[key, n[key]] = $8; all[key, n[key]] = $12; cpu[key, n[key]] = $15
      peak[key, n[key]] = $18; settled[key, n[key]] = $21 }
    function median(a, k, c,    i, j, t, v) {
        for (i = 1; i <= c; i++) v[i] = a[k, i]
        for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++)
            if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
        return v[int((c + 1) / 2)]
    }
    END { for (k in n) printf "%-28s %6s %6s %6s %6s %6s\n", k, median(sync, k, n[k]),
          median(all, k, n[k]), median(cpu, k, n[k]), median(peak, k, n[k]),
          median(settled, k, n[k]) }' | sort
