#!/usr/bin/env bash
# Image builder benchmark: a cold build of packages/lab.yaml (empty cache: Debian packages downloaded, root file
# system made by mmdebstrap), a warm rebuild after only the agent binary changed, and boot-to-ready of the raw
# image under UEFI (TCG where KVM does not work). Prints the times, the warm/cold ratio (target <= 0.10) and
# the image sizes. Needs root. Usage: scripts/bench-build.sh   (BENCH_DIR=... to keep the results elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-build-tools.sh
cargo build -q --release -p foothold-agent -p foothold-image-builder
scripts/lab-image-layout.sh >/dev/null
bench=${BENCH_DIR:-target/bench-build}
rm -rf "$bench"
mkdir -p "$bench"
build=target/release/foothold-build
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0=$(now)
"$build" build packages/lab.yaml --cache "$bench/cache" --out "$bench/cold" >"$bench/cold.log" 2>&1
t1=$(now)
cold=$(secs "$t0" "$t1")

# Only the agent changes: a copy with a byte appended (still the same program).
cp target/release/foothold-agent "$bench/agent"
printf '\n' >> "$bench/agent"
t0=$(now)
"$build" build packages/lab.yaml --cache "$bench/cache" --out "$bench/warm" --agent "$bench/agent" >"$bench/warm.log" 2>&1
t1=$(now)
warm=$(secs "$t0" "$t1")

raw="$bench/warm/foothold-lab.raw"
log="$bench/boot.log"
t0=$(now)
"$build" run "$raw" --snapshot --serial-log "$log" --forward 25480:5000 >"$bench/run.log" 2>&1 &
pid=$!
boot=timeout
for _ in $(seq 1 6000); do
  if grep -aq FOOTHOLD-READY "$log" 2>/dev/null; then boot=$(secs "$t0" "$(now)"); break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
pkill -P "$pid" 2>/dev/null || true
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
accel=$(grep -o 'Tcg\|Kvm' "$bench/run.log" | head -1)

size() { du -m --apparent-size "$1" | cut -f1; }
alloc() { du -m "$1" | cut -f1; }
echo "foothold-build, packages/lab.yaml, $(nproc) cores"
printf '%-44s %8s\n' "cold build (empty cache)" "${cold} s"
printf '%-44s %8s\n' "warm rebuild (agent binary changed)" "${warm} s"
printf '%-44s %8s\n' "warm / cold" "$(awk -v w="$warm" -v c="$cold" 'BEGIN { printf "%.3f", w / c }') (target <= 0.10)"
printf '%-44s %8s\n' "boot to ready, raw under UEFI ($accel)" "${boot} s"
printf '%-44s %8s\n' "raw image (size / allocated)" "$(size "$raw") / $(alloc "$raw") MiB"
printf '%-44s %8s\n' "qcow2" "$(size "$bench/warm/foothold-lab.qcow2") MiB"
printf '%-44s %8s\n' "ISO" "$(size "$bench/warm/foothold-lab.iso") MiB"
