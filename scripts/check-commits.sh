#!/usr/bin/env bash
# The commit conventions (CONTRIBUTING.md, "Commits"), checked on every commit after the one
# that added this script, up to HEAD (or the revision given): a subject of at most 72
# characters, `area: what changed` with the area one of a fixed list, and no merge commits
# (history is linear). Commits before this script are not checked: they predate the rule.
#
#   scripts/check-commits.sh          # the commits since this script's, up to HEAD
#   scripts/check-commits.sh REV      # ... up to REV
#
# The first commit is found by history (the one that adds this file), not by hash, so the
# check still works after the branch is rebased or cherry-picked. A shallow clone cannot show
# that commit or those after it whole: the check then fails, saying so, rather than passing on
# what it cannot see. Subjects are read with --no-show-signature, so a `log.showSignature`
# setting does not mix signature checks into them.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C.UTF-8 # count a subject's characters, not its bytes

areas=(cache workqueue controller manager leaderelection sharding webhook tls metrics events protobuf
    finalizer status apiserver examples tests e2e docs bench ci)
max=72
rev=${1:-HEAD}
self=scripts/check-commits.sh

fail() {
    echo "check-commits: $*" >&2
    exit 1
}

if [[ $(git rev-parse --is-inside-work-tree 2>/dev/null) != true ]]; then
    fail "$PWD is not inside a git work tree: run it in a clone of the repository" \
        "(a source archive has no history to check)."
fi
git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || fail "no such revision: $rev"
if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
    fail "this is a shallow clone: the commits to check may be cut off." \
        "Fetch the whole history (git fetch --unshallow) and run it again."
fi
first=$(git log --no-show-signature --format=%H --diff-filter=A "$rev" -- "$self" | tail -n 1)
[[ -n $first ]] || fail "$self is not added by any commit in $rev's history"

area_re=$(
    IFS='|'
    echo "${areas[*]}"
)
bad=0
count=0
while read -r hash parents; do
    count=$((count + 1))
    subject=$(git log -1 --no-show-signature --format=%s "$hash")
    short=$(git rev-parse --short "$hash")
    problems=()
    if [[ $parents == *" "* ]]; then
        problems+=("a merge commit (history is linear: rebase instead)")
    fi
    if ((${#subject} > max)); then
        problems+=("subject is ${#subject} characters, more than $max")
    fi
    if [[ ! $subject =~ ^($area_re):\ [^[:space:]] ]]; then
        if [[ $subject =~ ^($area_re):[[:space:]]*$ ]]; then
            problems+=("no description after '${BASH_REMATCH[1]}:' (say what changed)")
        elif [[ $subject =~ ^($area_re):[^[:space:]] ]]; then
            problems+=("no space after '${BASH_REMATCH[1]}:' (write '${BASH_REMATCH[1]}: what changed')")
        elif [[ $subject =~ ^($area_re):[[:space:]] ]]; then
            problems+=("one space after '${BASH_REMATCH[1]}:', then what changed")
        elif [[ $subject == 'Revert "'* ]]; then
            problems+=("a revert is titled 'area: revert \"...\"', not git's 'Revert \"...\"'")
        elif [[ $subject =~ ^([^:]*): ]]; then
            problems+=("unknown area '${BASH_REMATCH[1]}'")
        else
            problems+=("no 'area: ' prefix")
        fi
    fi
    if ((${#problems[@]})); then
        bad=$((bad + 1))
        echo "$short $subject"
        for p in "${problems[@]}"; do
            echo "    $p"
        done
    fi
done < <(git rev-list --reverse --parents "$first..$rev")

if ((bad)); then
    echo "check-commits: $bad of $count commits after ${first:0:7} break the conventions;" \
        "the areas are: ${areas[*]}" >&2
    exit 1
fi
echo "check-commits: $count commits after ${first:0:7}, all following the conventions"
