#!/usr/bin/env bash
# Image builder benchmark: a cold build of packages/lab.yaml (empty cache: Debian packages downloaded, root file
# system made by mmdebstrap), a warm rebuild after only the agent binary changed, and boot-to-ready of the raw
# image under UEFI (TCG where KVM does not work). Prints the times, the warm/cold ratio (target <= 0.10) and
# the image sizes; then the same for packages/appliance.yaml, with boot to a Ready node and to the agent's
# controllers leading and to Ironic and baremetal-operator ready, and the memory used at idle. Needs root (and Go for the appliance).
# Usage: scripts/bench-build.sh   (BENCH_DIR=... to keep the results elsewhere; APPLIANCE=0 for the lab only)
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
accel=$(grep -oE 'qemu under (TCG|KVM)' "$bench/run.log" | head -1 | cut -d' ' -f3 || true)

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

# The appliance (packages/appliance.yaml, Kubernetes built from source): APPLIANCE=0 skips it. "Cold" here is an
# empty image cache (Debian packages downloaded, mmdebstrap, every binary built again by Go, whose own build
# cache stays warm: a Go build from nothing takes about 10 minutes more on 2 cores).
[ "${APPLIANCE:-1}" = 1 ] || exit 0
command -v go >/dev/null || { echo "bench-build: the appliance needs Go to build Kubernetes" >&2; exit 1; }
key="$bench/id_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$key"
# Its deploy ramdisk (packages/ipa.yaml), which it takes from out/ipa, made first and not timed.
"$build" build packages/ipa.yaml --out "$bench/ipa" >"$bench/ipa.log" 2>&1
sed -e "s|path: \.\./out/ipa/|path: $bench/ipa/|" -e "s|path: \.\./|path: $(pwd)/|" \
  -e "s|authorizedKeys: \[\]|authorizedKeys: [\"$(cat "$key.pub")\"]|" \
  packages/appliance.yaml > "$bench/appliance.yaml"
t0=$(now)
"$build" build "$bench/appliance.yaml" --cache "$bench/cache-app" --out "$bench/app-cold" >"$bench/app-cold.log" 2>&1
acold=$(secs "$t0" "$(now)")
t0=$(now)
"$build" build "$bench/appliance.yaml" --cache "$bench/cache-app" --out "$bench/app-warm" --agent "$bench/agent" \
  >"$bench/app-warm.log" 2>&1
awarm=$(secs "$t0" "$(now)")
araw="$bench/app-warm/foothold-appliance.raw"
alog="$bench/app-boot.log"
# Its provisioning NIC (ens4, where Ironic's API listens) on a tap of its own that stays down here: nothing of this
# host's reaches it, and nothing of the guest's leaves it.
tap=fhbench$$
ip tuntap add dev "$tap" mode tap
trap 'ip tuntap del dev "$tap" mode tap 2>/dev/null || true' EXIT
t0=$(now)
"$build" run "$araw" --snapshot --isolated --memory 3072 --serial-log "$alog" --forward 25481:5000 \
  --forward 25422:22 --provisioning-tap "$tap" >"$bench/app-run.log" 2>&1 &
pid=$!
aready=timeout
aleading=timeout
ametal3=timeout
for _ in $(seq 1 12000); do
  if [ "$aready" = timeout ] && grep -aq 'kubernetes=ready' "$alog" 2>/dev/null; then aready=$(secs "$t0" "$(now)"); fi
  if [ "$aleading" = timeout ] && curl -ksf --max-time 5 https://127.0.0.1:25481/readyz 2>/dev/null | grep -q '"leading"'; then
    aleading=$(secs "$t0" "$(now)")
  fi
  if [ "$ametal3" = timeout ] && curl -ksf --max-time 5 https://127.0.0.1:25481/readyz 2>/dev/null \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["services"]; sys.exit(0 if s["ironic"]["state"]=="ok" and s["baremetal-operator"]["state"]=="ok" else 1)' 2>/dev/null; then
    ametal3=$(secs "$t0" "$(now)")
  fi
  [ "$aready" != timeout ] && [ "$aleading" != timeout ] && [ "$ametal3" != timeout ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
# Memory once the cluster and Metal3 have settled for a minute (what the kernel counts as used, page cache aside).
sleep 60
mem=$(ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR \
  -i "$key" -p 25422 foothold@127.0.0.1 "free -m | awk '/^Mem:/ {print \$3}'" 2>/dev/null || echo unknown)
pkill -P "$pid" 2>/dev/null || true
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
echo
echo "foothold-build, packages/appliance.yaml, $(nproc) cores"
printf '%-44s %8s\n' "cold build (empty image cache, Go cache warm)" "${acold} s"
printf '%-44s %8s\n' "warm rebuild (agent binary changed)" "${awarm} s"
printf '%-44s %8s\n' "warm / cold" "$(awk -v w="$awarm" -v c="$acold" 'BEGIN { printf "%.3f", w / c }') (target <= 0.10)"
printf '%-44s %8s\n' "boot to node Ready, raw under UEFI" "${aready} s (target <= 180)"
printf '%-44s %8s\n' "boot to agent controllers leading" "${aleading} s (target <= 180)"
printf '%-44s %8s\n' "boot to Ironic and BMO ready" "${ametal3} s"
printf '%-44s %8s\n' "memory used at idle (with Metal3)" "${mem} MiB (target <= 3072)"
printf '%-44s %8s\n' "raw image (size / allocated)" "$(size "$araw") / $(alloc "$araw") MiB"
printf '%-44s %8s\n' "qcow2" "$(size "$bench/app-warm/foothold-appliance.qcow2") MiB"
printf '%-44s %8s\n' "ISO" "$(size "$bench/app-warm/foothold-appliance.iso") MiB"
