#!/usr/bin/env bash
# Compares two builds of a bench binary that takes `--once SCENARIO` and prints
# "SCENARIO NS_PER_OP" (benches/workqueue.rs does): runs them alternating, RUNS times each per
# scenario, and prints both medians and every run. Used to measure one change, the binary built
# before it against the one built after:
#
#   cargo bench --bench workqueue --no-run     # before the change; copy the binary to BEFORE
#   cargo bench --bench workqueue --no-run     # after it; copy it to AFTER
#   scripts/bench-ab.sh BEFORE AFTER RUNS SCENARIO...
set -euo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 BEFORE AFTER RUNS SCENARIO..." >&2; exit 2; }
before=$1 after=$2 runs=$3
shift 3
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for scenario in "$@"; do
    a="" b=""
    for ((i = 0; i < runs; i++)); do
        b="$b $("$before" --once "$scenario" | awk '{print $2}')"
        a="$a $("$after" --once "$scenario" | awk '{print $2}')"
    done
    echo "$scenario: before $(median <<<"$b") | after $(median <<<"$a")   (before:$b) (after:$a)"
done
