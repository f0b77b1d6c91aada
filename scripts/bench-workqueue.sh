#!/usr/bin/env bash
# ctrlkit's workqueue beside client-go's own (the client-go module CTRLKIT_CLIENT_GO names,
# built by scripts/peer.sh), measured in one run: one process per measurement, alternating
# client-go's typed queue, its untyped queue and every ctrlkit shape of the same scenario, ROUNDS
# rounds; prints the medians and the ratios (against the faster of client-go's two queues) as
# docs/benchmarks/workqueue.md's table.
#
#   CTRLKIT_CLIENT_GO=../shared/kube/v1.36.2/client-go scripts/bench-workqueue.sh [ROUNDS]
#                                                               (default 5 rounds)
#
# The scenarios and shapes are described in benches/workqueue.rs; client-go's harness is
# benches/peers/client-go/workqueue/main.go (goroutines, GOMAXPROCS = the machine's cores).
# The target of each row is 2x client-go (ns per operation at most half of client-go's).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}

peer=$(scripts/peer.sh workqueue)
# The binary is client-go-VERSION-workqueue.
label=$(basename "$peer" | sed 's/^client-go-\(.*\)-workqueue$/client-go \1/')
ours=$(cargo bench --bench workqueue --no-run --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "workqueue" and m.get("executable"):
        print(m["executable"])')
[[ -x $ours ]] || { echo "bench-workqueue.sh: no workqueue bench binary" >&2; exit 1; }

declare -A shapes=(
    [add]="plain priorities"
    [get_done]="plain priorities"
    [producers_workers]="tasks yielding_tasks threads priorities"
    [dedup_storm]="tasks yielding_tasks threads priorities"
    [dedup_alone]="plain floor lookup"
    [rate_limited_forget]="plain priorities"
)
order=(add get_done producers_workers dedup_storm dedup_alone rate_limited_forget)
results=$(mktemp)
trap 'rm -f "$results"' EXIT

for ((round = 1; round <= rounds; round++)); do
    echo "round $round of $rounds" >&2
    for scenario in "${order[@]}"; do
        for flavour in typed untyped; do
            "$peer" "$scenario" "$flavour" | sed "s/^/client-go-$flavour /" >>"$results"
        done
        for shape in ${shapes[$scenario]}; do
            "$ours" --once "$scenario/$shape" | sed 's/^/ctrlkit /' >>"$results"
        done
    done
done

python3 - "$results" "$rounds" "$(nproc)" "$label" <<'EOF'
import statistics, sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    peer, scenario, ns = line.split()
    runs[(peer, scenario)].append(float(ns))
median = {k: statistics.median(v) for k, v in runs.items()}

titles = {
    "add": "add 1,000,000 distinct keys",
    "get_done": "then get + done all of them",
    "producers_workers": "2 producers + 2 workers, 1,000,000 items",
    "dedup_storm": "dedup storm: 1,000,000 adds over 1,000 keys, 2 workers draining",
    "dedup_alone": "the same adds, no worker: an add of a key already queued",
    "rate_limited_forget": "add_rate_limited + forget, default controller limiter",
}
per_second = {"producers_workers": "items/s", "dedup_storm": "adds/s"}

def figure(scenario, ns):
    if scenario in per_second:
        return f"{1e3 / ns:.2f} M {per_second[scenario]} ({ns:.0f} ns)"
    return f"{ns:.0f} ns"

print("every run, in the order they ran (who, scenario, ns per operation):")
for line in open(sys.argv[1]):
    print("    " + line.rstrip())
print()
print(f"medians of {sys.argv[2]} alternating runs, {sys.argv[3]} cores; ratio = the faster client-go queue's time / ctrlkit's")
print()
print(f"| scenario | shape | {sys.argv[4]}, typed | untyped | ctrlkit | ratio | target 2x |")
print("|---|---|---|---|---|---|---|")
for scenario in titles:
    typed = median[("client-go-typed", scenario)]
    untyped = median[("client-go-untyped", scenario)]
    go = min(typed, untyped)
    # In the order they ran.
    shapes = [s for (p, s) in median if p == "ctrlkit" and s.startswith(scenario + "/")]
    for i, full in enumerate(shapes):
        ours = median[("ctrlkit", full)]
        ratio = go / ours
        title = titles[scenario] if i == 0 else ""
        go_cells = f"{figure(scenario, typed)} | {figure(scenario, untyped)}" if i == 0 else " | "
        # The floors are no queue: bounds on the row above, not rows with a target.
        floor = full.endswith("/floor") or full.endswith("/lookup")
        met = "(a floor)" if floor else "met" if ratio >= 2 else "missed"
        print(f"| {title} | {full.split('/')[1]} | {go_cells} | {figure(scenario, ours)} | {ratio:.2f}x | {met} |")
EOF
