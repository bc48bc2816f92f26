#!/usr/bin/env bash
# The instructions a kernel runs, counted by callgrind, for one case of an ignored timing test
# (a case as the test prints it):
# - "KERNEL CODE ROWSxCOLSxM" (`compute_speed`, say "avx2 Q4_1 2048x576x8"): the weight-product
#   kernel's instructions per 1,000 products;
# - "KERNEL attention QUERIESxCACHED" (`attention_speed`, say "avx2 attention 12x2048"): the
#   attention kernel's instructions per query and cache row.
# The count is the same on every run, where timings on a shared machine move by a third. Needs
# valgrind, which runs the `avx2` kernels (not AVX-512 nor AVX-VNNI).
set -euo pipefail

case="${1:?usage: benches/count_instructions.sh "KERNEL CODE ROWSxCOLSxM" or "KERNEL attention QUERIESxCACHED"}"
shape="${case##* }"
if [[ "$case" == *" attention "* ]]; then
    test=attention_speed variable=COPILOTD_ATTENTION_CASE unit=blocks
    functions='copilotd_model::attention::vector::attend_[a-z0-9]+$'
    IFS=x read -r queries cached <<<"$shape"
    per=$((queries * cached)) scale=1 what="instructions per query and cache row"
else
    test=compute_speed variable=COPILOTD_COMPUTE_CASE unit=multiplies
    functions='copilotd_model::quant::[a-z0-9]+::multiply[a-z0-9_]*$'
    IFS=x read -r rows cols inputs <<<"$shape"
    per=$((rows * cols * inputs)) scale=1000 what="instructions per 1,000 products"
fi
counts="$(mktemp)"
trap 'rm -f "$counts"' EXIT

printed="$(env "$variable=$case" \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="valgrind --tool=callgrind --log-file=/dev/null --callgrind-out-file=$counts" \
    cargo test --quiet --release -p copilotd-model --lib "$test" -- --ignored --nocapture)"
runs="$(grep -o "([0-9]* $unit)" <<<"$printed" | tr -dc 0-9 || true)"
if [[ -z "$runs" ]]; then
    echo "no case \"$case\" ran: $test prints the cases this machine has" >&2
    exit 1
fi
# The kernel entry points' own instructions and those inlined into them.
instructions="$(callgrind_annotate "$counts" |
    awk -v pattern="$functions" '$0 ~ pattern { gsub(",", "", $1); sum += $1 } END { print sum + 0 }')"
awk -v i="$instructions" -v n="$runs" -v per="$per" -v scale="$scale" -v label="$case" -v what="$what" -v unit="$unit" \
    'BEGIN { printf "%s: %.*f %s (%d %s)\n", label, (scale == 1 ? 1 : 0), scale * i / (n * per), what, n, unit }'
