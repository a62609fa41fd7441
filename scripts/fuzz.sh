#!/usr/bin/env bash
# Fuzzes each cargo-fuzz target in fuzz/ (or the ones named) for a while, on the nightly toolchain beside the
# stable one: `scripts/fuzz.sh [--seconds N] [target ...]` (default 60 s each; --runs N stops at N executions).
# New inputs that reach new code go to fuzz/corpus/<target>/ (commit them: CI replays the corpus on stable);
# a crash is copied to fuzz/regressions/<target>/ (commit it with its fix) and the script exits 1. Prints, per
# target: executions, executions per second, corpus files and the date, for the results log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
runs=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
export CARGO_TARGET_DIR="$PWD/target/fuzz"
failed=0
printf '%-12s %14s %10s %8s  %s\n' target executions exec/s corpus date
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/regressions/$t"
  log="target/fuzz/$t.log"
  mkdir -p target/fuzz
  limit=(-max_total_time="$seconds")
  [ "$runs" -gt 0 ] && limit=(-runs="$runs")
  if ! (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- "${limit[@]}" -print_final_stats=1 \
        -artifact_prefix="$PWD/artifacts/$t/" -max_len=65536) >"$log" 2>&1; then
    failed=1
    echo "fuzz: $t found a crash (log: $log)" >&2
  fi
  mkdir -p "fuzz/artifacts/$t"
  for a in fuzz/artifacts/"$t"/*; do
    [ -e "$a" ] && cp "$a" "fuzz/regressions/$t/" && echo "fuzz: saved $a to fuzz/regressions/$t/" >&2
  done
  rm -rf /tmp/foothold-fuzz-*
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  printf '%-12s %14s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(ls "fuzz/corpus/$t" | wc -l)" "$(date -u +%F)"
done
exit $failed
