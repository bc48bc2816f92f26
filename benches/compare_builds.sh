#!/usr/bin/env bash
# Times one weight-product case (`compute_speed`, a case as it prints them, say
# "avx2 Q4_1 2048x576x8") with the kernels of two git revisions, taking turns, and prints each
# revision's least and median µs per multiply and the second's median against the first's.
#
#   benches/compare_builds.sh REV_A REV_B "CASE" [ROUNDS]
#
# On a shared machine a case's time moves by a tenth from minute to minute, more than most kernel
# changes: taking turns puts both builds in the same minutes, and the median over many rounds
# (default 12) is what to compare. Each revision is built from a temporary git worktree, in this
# repository's own target directory (its dependencies are reused).
set -euo pipefail

usage='usage: benches/compare_builds.sh REV_A REV_B "KERNEL CODE ROWSxCOLSxM" [ROUNDS]'
rev_a="${1:?$usage}" rev_b="${2:?$usage}" case="${3:?$usage}" rounds="${4:-12}"
repo="$(git rev-parse --show-toplevel)"
target="${CARGO_TARGET_DIR:-$repo/target}"
work="$(mktemp -d)"
trap 'git -C "$repo" worktree remove --force "$work/tree" 2>/dev/null || true; rm -rf "$work"' EXIT

# The `copilotd-model` unit-test binary of revision $1, copied to $2.
build() {
    local rev="$1" to="$2" binary
    git -C "$repo" worktree add --quiet --detach "$work/tree" "$rev"
    binary="$(cd "$work/tree" && CARGO_TARGET_DIR="$target" cargo test --quiet --release --locked \
        -p copilotd-model --lib --no-run --message-format=json |
        grep -o '"executable":"[^"]*"' | cut -d'"' -f4)"
    cp "$binary" "$to"
    git -C "$repo" worktree remove --force "$work/tree"
}

# µs per multiply of one run of the case with binary $1.
time_once() {
    local printed
    printed="$(COPILOTD_COMPUTE_CASE="$case" "$1" compute_speed --ignored --nocapture --test-threads 1)"
    grep -o "$case: [0-9.]* µs" <<<"$printed" | awk '{ print $(NF - 1) }'
}

build "$rev_a" "$work/a"
# A case this machine lacks stops the script before the second build.
if [[ -z "$(time_once "$work/a")" ]]; then
    echo "no case \"$case\" ran: compute_speed prints the cases this machine has" >&2
    exit 1
fi
build "$rev_b" "$work/b"
for ((round = 1; round <= rounds; round++)); do
    # Alternate which build goes first, so neither always follows the other.
    if ((round % 2)); then order="a b"; else order="b a"; fi
    for build in $order; do
        echo "$build $(time_once "$work/$build")" >>"$work/times"
    done
done

# Least and median of column 2 for the lines of build $1.
stats() {
    awk -v b="$1" '$1 == b { print $2 }' "$work/times" | sort -g |
        awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print v[1], m }'
}
read -r least_a median_a < <(stats a)
read -r least_b median_b < <(stats b)
echo "$case, $rounds rounds taking turns, µs per multiply, least (median):"
echo "  $rev_a: $least_a ($median_a)"
echo "  $rev_b: $least_b ($median_b)"
awk -v a="$median_a" -v b="$median_b" -v ra="$rev_a" -v rb="$rev_b" \
    'BEGIN { printf "  median of %s against %s: %+.1f%%\n", rb, ra, 100 * (b / a - 1) }'
