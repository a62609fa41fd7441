#!/usr/bin/env bash
# Boots an image N times under TCG, as the tests do, and reports each boot's seconds to its ready marker and
# the guest kernel panics qemu's TCG caused (`foothold-build run` boots again once after one; a second ends
# the boot). Ends with one line: boots, failures, panics, and the median and slowest boot. The console and
# `run`'s output of a boot that failed or saw a panic are kept in FOOTHOLD_BOOT_LOGS (default
# /var/tmp/foothold-boot-reliability), named in its line.
#
# Usage: scripts/boot-reliability.sh IMAGE [N] [-- extra `foothold-build run` arguments]
#   N defaults to 20. FOOTHOLD_BUILD names the builder (default target/release/foothold-build), FOOTHOLD_QEMU
#   the qemu. Each boot is `run --accel tcg --snapshot --isolated` with its own free forwards, so the image is
#   never changed and nothing of the host is reachable from the guest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
on_error boot-reliability
image=${1:?usage: scripts/boot-reliability.sh IMAGE [N] [-- run arguments]}
shift
n=20
if [ $# -gt 0 ] && [ "$1" != -- ]; then
  n=$1
  shift
fi
[ "${1:-}" = -- ] && shift
builder=${FOOTHOLD_BUILD:-target/release/foothold-build}
[ -x "$builder" ] || die "$builder: no builder (cargo build --release -p foothold-agent -p foothold-image-builder)"
[ -f "$image" ] || die "$image: no such image"
qemu=${FOOTHOLD_QEMU:-qemu-system-x86_64}
kept=${FOOTHOLD_BOOT_LOGS:-/var/tmp/foothold-boot-reliability}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "boot-reliability: $image, $n boots under TCG, $("$qemu" --version | head -1)"
failed=0 panics=0
: >"$work/seconds"
for i in $(seq 1 "$n"); do
  start=$(date +%s.%N)
  rc=0
  "$builder" run --accel tcg --qemu "$qemu" --snapshot --isolated --stop-when-ready \
    --forward "$(free_port):5000" --forward "$(free_port):6443" \
    --serial-log "$work/console-$i.log" "$image" "$@" >"$work/run-$i.log" 2>&1 || rc=$?
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  p=$(grep -c 'the guest kernel panicked' "$work/run-$i.log" || true)
  panics=$((panics + p))
  logs=
  if [ "$rc" -ne 0 ] || [ "$p" -gt 0 ]; then
    mkdir -p "$kept"
    logs="$kept/$(date -u +%Y%m%dT%H%M%SZ)-boot-$i"
    cp "$work/console-$i.log" "$logs.console.log" 2>/dev/null || true
    cp "$work/run-$i.log" "$logs.run.log"
    logs=" (logs: $logs.*)"
  fi
  if [ "$rc" -eq 0 ]; then
    echo "$seconds" >>"$work/seconds"
    printf 'boot %2d: ready in %6.1f s, %d guest panics%s\n' "$i" "$seconds" "$p" "$logs"
  else
    failed=$((failed + 1))
    printf 'boot %2d: FAILED after %6.1f s, %d guest panics%s: %s\n' "$i" "$seconds" "$p" "$logs" "$(tail -1 "$work/run-$i.log")"
    grep -A3 'the guest kernel panicked' "$work/run-$i.log" | head -8 || true
  fi
done
summary=$(sort -n "$work/seconds" | awk '{a[NR]=$1} END {if (NR) printf "median %.1f s, slowest %.1f s", a[int((NR+1)/2)], a[NR]; else printf "no boot reached its marker"}')
echo "boot-reliability: $n boots, $failed failed, $panics guest kernel panics; $summary"
[ "$failed" -eq 0 ]
