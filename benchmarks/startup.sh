#!/usr/bin/env bash
# Start-up as a user meets it: `make demo`'s edit with no background engine before the first
# call, then again on the engine it started. Prints each run's wall times and "engine ready".
# Usage: benchmarks/startup.sh [RUNS]   (from the repository root, after `make setup`;
# the example file is restored after every call)
set -u
runs=${1:-3}
hsedit=.venv/bin/hsedit
file=examples/temperature.py
edit=(apply "$file" "set FREEZING_F to 32.5")
now() { date +%s.%N; }
for i in $(seq "$runs"); do
  "$hsedit" daemon stop --all >/dev/null 2>&1
  sleep 2
  git checkout -q -- "$file"
  start=$(now)
  ready=$("$hsedit" "${edit[@]}" 2>&1 >/dev/null | grep -o "engine ready in [0-9.]* s")
  first=$(echo "$(now) - $start" | bc)
  git checkout -q -- "$file"
  start=$(now)
  "$hsedit" "${edit[@]}" >/dev/null 2>&1
  second=$(echo "$(now) - $start" | bc)
  git checkout -q -- "$file"
  printf 'run %d: first %.2f s (%s), second %.2f s\n' "$i" "$first" "$ready" "$second"
done
