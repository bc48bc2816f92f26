#!/usr/bin/env bash
# The instructions the weight-product kernel runs per 1,000 products, for one case of the ignored
# test `compute_speed` (a case as it prints them, say "avx2 Q4_1 2048x576x8"), counted by
# callgrind. The count is the same on every run, where timings on a shared machine move by a
# third. Needs valgrind, which runs the `avx2` kernel (not AVX-512 nor AVX-VNNI).
set -euo pipefail

case="${1:?usage: benches/count_instructions.sh "KERNEL CODE ROWSxCOLSxM" (a case compute_speed prints)}"
shape="${case##* }"
IFS=x read -r rows cols inputs <<<"$shape"
counts="$(mktemp)"
trap 'rm -f "$counts"' EXIT

printed="$(COPILOTD_COMPUTE_CASE="$case" \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="valgrind --tool=callgrind --log-file=/dev/null --callgrind-out-file=$counts" \
    cargo test --quiet --release -p copilotd-model --lib compute_speed -- --ignored --nocapture)"
multiplies="$(grep -o "([0-9]* multiplies)" <<<"$printed" | tr -dc 0-9 || true)"
if [[ -z "$multiplies" ]]; then
    echo "no case \"$case\" ran: compute_speed prints the cases this machine has" >&2
    exit 1
fi
# Every kernel entry point's own instructions and those inlined into it.
instructions="$(callgrind_annotate "$counts" |
    awk '/copilotd_model::quant::[a-z0-9]+::multiply[a-z0-9_]*$/ { gsub(",", "", $1); sum += $1 } END { print sum + 0 }')"
awk -v i="$instructions" -v n="$multiplies" -v r="$rows" -v c="$cols" -v m="$inputs" -v label="$case" \
    'BEGIN { printf "%s: %.0f instructions per 1,000 products (%d multiplies)\n", label, 1000 * i / (n * r * c * m), n }'
