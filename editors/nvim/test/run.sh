#!/usr/bin/env bash
# Runs the Neovim plugin's tests: test/unit.lua (against an in-process fake server), then test/e2e.lua (the real
# daemon and model), and prints the total as "N passed, M failed". Exits non-zero on any failure.
#
# Environment:
#   NVIM            Neovim binary (>= 0.10). Default: nvim on PATH, else the one .ci/install-nvim installs.
#   COPILOTD_BIN    copilotd binary for the end-to-end test. Without it the e2e test is skipped, or fails under CI.
#   COPILOTD_MODEL  GGUF model for the daemon (optional; default: the daemon's default model from its cache).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

nvim=${NVIM:-$(command -v nvim || true)}
if [ -z "$nvim" ] && [ -x "$root/.ci/install-nvim" ]; then
  "$root/.ci/install-nvim" >&2 && nvim="$root/target/tools/nvim/bin/nvim"
fi
if [ -z "$nvim" ] || ! [ -x "$nvim" ]; then
  echo "run.sh: no Neovim found; set NVIM to a Neovim >= 0.10 binary" >&2
  exit 1
fi
echo "# $("$nvim" --version | head -1) ($nvim)"

passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Runs one test script and adds its closing "N passed, M failed" line to the totals.
run() {
  local script=$1 limit=$2
  echo "# $script"
  timeout "$limit" "$nvim" --headless -u NONE -i NONE -n -l "$here/$script" 2>&1 | tee "$log"
  local status=${PIPESTATUS[0]}
  local summary
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [ -n "$summary" ]; then
    passed=$((passed + ${summary%% passed*}))
    local f=${summary#*passed, }
    failed=$((failed + ${f%% failed*}))
  fi
  if [ "$status" -ne 0 ] && { [ -z "$summary" ] || [ "${summary#*passed, }" = "0 failed" ]; }; then
    echo "FAIL - $script exited with status $status"
    failed=$((failed + 1))
  fi
}

run unit.lua 300

if [ -n "${COPILOTD_BIN:-}" ]; then
  run e2e.lua 1800
elif [ -n "${CI:-}" ]; then
  echo "FAIL - COPILOTD_BIN is not set: the end-to-end test needs the copilotd binary"
  failed=$((failed + 1))
else
  echo "# skipping e2e.lua: set COPILOTD_BIN (and optionally COPILOTD_MODEL) to run it"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
