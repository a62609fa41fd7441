#!/usr/bin/env bash
# Metal3 at scale, beyond what can be booted here: the appliance's baremetal-operator and Ironic drive HOSTS
# BareMetalHosts (default 1000) whose BMCs are sushy-tools' fake driver (systems simulated, no VMs: the
# technique Metal3 uses for its own scale tests) to Provisioned with a live ISO. Prints the appliance's memory at
# idle with Kubernetes + BMO + Ironic + agent (target <= 3 GiB), the time from applying the hosts to all
# available and to all provisioned (target <= 15 min), and the appliance's peak memory and mean CPU meanwhile
# (target <= 4 GiB), then the calls the fake BMC answered by kind and (MODE=native) how long hosts stayed in
# each provisioning state. Needs root and what
# scripts/install-test-tools.sh installs (sushy-tools).
# Two ways to run the appliance (MODE):
#   vm      (default) the image booted in qemu, isolated; under TCG here, which measures qemu's emulation as much
#           as Metal3;
#   native  the image's own root file system (taken out of the raw image) run on this host's CPU: its units'
#           commands in a chroot, in network and PID namespaces of their own (scripts/appliance-root.sh): the
#           same binaries, configuration and first-boot scripts, without the kernel, kubelet, containerd and
#           CoreDNS, which Metal3 does not use. Memory is then the appliance processes' resident sum.
# Usage: scripts/bench-metal3-scale.sh [hosts]   (IMAGE=<appliance .raw> uses that image instead of building
# packages/appliance.yaml; for MODE=vm it must take the SSH key in BENCH_DIR/id_ed25519 for its user foothold;
# LIMIT_SECONDS=3600 ends the wait for all provisioned, reporting how many were by then; BMO_CONCURRENCY=N has
# BMO reconcile N hosts at once (MODE=native). The appliance is built as packages/appliance.yaml has it, a site
# that provisions to disk: the provisioning network's DHCP on and the deploy ramdisk of packages/ipa.yaml in it,
# so Ironic is configured for inspection, cleaning and disk images and its API is HTTPS on the provisioning
# address (MODE=native puts that address on loopback); the hosts here still skip inspection and cleaning, which
# a fake BMC cannot boot a ramdisk for. LIVE_ISO=1 builds it without both, as a site that boots live ISOs only:
# the default for MODE=vm, whose VM has no provisioning NIC here)
set -euo pipefail
# A command that fails ends the run (and, in native mode, every unit with it): say which.
trap 'echo "bench-metal3-scale: line $LINENO: a command failed (exit status $?)" >&2' ERR
cd "$(dirname "$0")/.."
hosts=${1:-1000}
bench=${BENCH_DIR:-target/bench-metal3}
mkdir -p "$bench"
bench=$(cd "$bench" && pwd)
mode=${MODE:-vm}
case $mode in vm|native) ;; *) echo "bench-metal3-scale: MODE=$mode: vm or native" >&2; exit 2 ;; esac
live_iso=${LIVE_ISO:-$([ "$mode" = vm ] && echo 1 || echo 0)}
if [ "$live_iso" != 1 ] && [ "$mode" != native ]; then
  echo "bench-metal3-scale: MODE=vm needs LIVE_ISO=1 (the VM has no provisioning NIC)" >&2; exit 2
fi
build=target/release/foothold-build
sushy=$(pwd)/target/tools/bin/sushy-emulator
[ -x "$sushy" ] || { echo "bench-metal3-scale: $sushy missing (scripts/install-test-tools.sh)" >&2; exit 1; }
root="$bench/root"
. scripts/appliance-root.sh
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

key="$bench/id_ed25519"
if [ -z "${BENCH_INSIDE:-}" ]; then
  # foothold-build makes the image and, for MODE=vm, boots it.
  if [ -z "${IMAGE:-}" ] || [ "$mode" = vm ]; then cargo build -q --release -p foothold-agent -p foothold-image-builder; fi
  [ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -f "$key"
  image=${IMAGE:-}
  if [ -z "$image" ]; then
    sed -e "s|path: \.\./out/ipa/|path: $bench/ipa/|" -e "s|path: \.\./|path: $(pwd)/|" \
      -e "s|authorizedKeys: \[\]|authorizedKeys: [\"$(cat "$key.pub")\"]|" \
      -e 's/formats: \[raw, qcow2, iso\]/formats: [raw]/' packages/appliance.yaml > "$bench/appliance.yaml"
    if [ "$live_iso" = 1 ]; then
      python3 - "$bench/appliance.yaml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
for what, pattern in [
    ("the provisioning network's dhcp", r"\n    dhcp: \{[^}]*\}\n"),
    ("metal3.deployRamdisk", r"\n    deployRamdisk:\n(      .*\n)+"),
]:
    text, n = re.subn(pattern, "\n", text, count=1)
    if n != 1:
        sys.exit(f"bench-metal3-scale: packages/appliance.yaml has no {what} to take out")
open(path, "w").write(text)
PY
    elif [ ! -s "$bench/ipa/foothold-ipa.initramfs" ]; then
      "$build" build packages/ipa.yaml --out "$bench/ipa" > "$bench/ipa-build.log" 2>&1
    fi
    rm -rf "$bench/out"
    "$build" build "$bench/appliance.yaml" --out "$bench/out" > "$bench/build.log" 2>&1
    image="$bench/out/foothold-appliance.raw"
  fi
  if [ "$mode" = native ]; then
    root_extract "$image" "$root"
    # BMO_CONCURRENCY=N: BMO reconciles N hosts at once instead of the image's setting.
    if [ -n "${BMO_CONCURRENCY:-}" ]; then
      sed -i "s/^BMO_CONCURRENCY=.*/BMO_CONCURRENCY=$BMO_CONCURRENCY/" "$root/etc/foothold/metal3.env"
      grep -q "^BMO_CONCURRENCY=$BMO_CONCURRENCY\$" "$root/etc/foothold/metal3.env"
    fi
    # The rest runs in the appliance's namespaces; everything started there ends with it.
    BENCH_INSIDE=1 BENCH_DIR="$bench" exec unshare --mount --net --pid --fork --kill-child "$0" "$hosts"
  fi
else
  root_enter "$root"
  # Ironic's API on the provisioning address (unless LIVE_ISO=1), which the booted appliance has on its NIC.
  ironic_ip=$(sed -n 's/^host_ip = //p' "$root/etc/ironic/ironic.conf")
  [ "$ironic_ip" = 127.0.0.1 ] || ip addr add "$ironic_ip/32" dev lo
fi

# The fake BMC: HOSTS simulated systems behind one user.
bmc_port=$(port)
rm -rf "$bench/bmc-state"
mkdir -p "$bench/bmc-state"
htpasswd -nbB admin bench-pw > "$bench/bmc.htpasswd"
{
  echo "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'"
  echo "SUSHY_EMULATOR_LISTEN_PORT = $bmc_port"
  echo "SUSHY_EMULATOR_AUTH_FILE = '$bench/bmc.htpasswd'"
  echo "SUSHY_EMULATOR_FAKE_DRIVER = True"
  echo "SUSHY_EMULATOR_STATE_DIR = '$bench/bmc-state'"
  printf 'SUSHY_EMULATOR_FAKE_SYSTEMS = ['
  for i in $(seq 0 $((hosts - 1))); do
    printf "{'uuid': '5ca1e000-0000-4000-8000-%012x', 'name': 'scale-%d', 'power_state': 'Off', 'nics': [{'mac': '02:5c:%02x:%02x:%02x:%02x', 'ip': '172.22.1.1'}]}, " \
      "$i" "$i" $((i >> 24 & 255)) $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255))
  done
  echo ']'
} > "$bench/sushy.conf"
# At a site the BMCs are machines of their own; here they share the appliance's cores, so they yield to it.
TMPDIR="$bench/bmc-state" nice -n 10 "$sushy" --config "$bench/sushy.conf" --fake > "$bench/bmc.log" 2>&1 &
sushy_pid=$!
# Its first look at the systems loads all of them into its state database; left to the first of Ironic's
# parallel requests, several loads raced there and leaked connections until its file descriptors ran out and
# every answer was a 500. So one request makes it, and the BMC is ready when it lists every host.
bmc_ready=
for _ in $(seq 1 120); do
  if curl -sf --max-time 30 -u admin:bench-pw "http://127.0.0.1:$bmc_port/redfish/v1/Systems" 2>/dev/null \
    | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['Members@odata.count'] == $hosts else 1)" 2>/dev/null; then
    bmc_ready=1; break
  fi
  kill -0 "$sushy_pid" 2>/dev/null || break
  sleep 1
done
[ -n "$bmc_ready" ] || { echo "bench-metal3-scale: the fake BMC never listed $hosts systems (see $bench/bmc.log)" >&2; exit 1; }

# Where the appliance reaches the fake BMC: qemu's guest forward, or the shared loopback.
if [ "$mode" = vm ]; then bmc_at=10.0.2.100:8000; else bmc_at=127.0.0.1:$bmc_port; fi
# The hosts: one credentials Secret each, UEFI, no inspection or cleaning, a live ISO from the agent. The fake
# BMC does download it (on this host, from the agent's forward on 127.0.0.1, never anywhere else), so it is a
# small stand-in uploaded to the agent once it is up.
{
  echo "apiVersion: v1"; echo "kind: Namespace"; echo "metadata: {name: scale}"
  for i in $(seq 0 $((hosts - 1))); do
    cat <<YAML
---
apiVersion: v1
kind: Secret
metadata: {name: scale-$i-bmc, namespace: scale}
stringData: {username: admin, password: bench-pw}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata: {name: scale-$i, namespace: scale}
spec:
  online: true
  bootMode: UEFI
  inspectionMode: disabled
  automatedCleaningMode: disabled
  bootMACAddress: "$(printf '02:5c:%02x:%02x:%02x:%02x' $((i >> 24 & 255)) $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)))"
  bmc: {address: "redfish-virtualmedia+http://$bmc_at/redfish/v1/Systems/$(printf '5ca1e000-0000-4000-8000-%012x' "$i")", credentialsName: scale-$i-bmc}
  image: {url: "https://127.0.0.1:AGENT_PORT/files/foothold/scale/os_images/live.iso", format: live-iso}
YAML
  done
} > "$bench/hosts.yaml"

if [ "$mode" = vm ]; then
  agent_port=$(port)
  ssh_port=$(port)
  log="$bench/console.log"
  rm -f "$log"
  "$build" run "$image" --snapshot --isolated --memory 6144 --serial-log "$log" --forward "$agent_port:5000" \
    --forward "$ssh_port:22" --guest-forward "8000:$bmc_port" > "$bench/run.log" 2>&1 &
  vm_pid=$!
  cleanup() {
    pkill -P "$vm_pid" 2>/dev/null || true
    kill "$vm_pid" "$sushy_pid" 2>/dev/null || true
    wait 2>/dev/null || true
  }
  trap cleanup EXIT
  on() {
    ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR \
      -o ConnectTimeout=30 -i "$key" -p "$ssh_port" foothold@127.0.0.1 "$@"
  }
  # Used memory (MiB, page cache aside) and the CPU's busy and total jiffies.
  sample() { on "free -m | awk '/^Mem:/ {print \$3}'; head -1 /proc/stat"; }
  alive() { kill -0 "$vm_pid" 2>/dev/null; }
  as_root=sudo
  where="the appliance booted in qemu ($(nproc) cores; $(grep -oE 'qemu under (TCG|KVM)' "$bench/run.log" 2>/dev/null | head -1 | cut -d' ' -f3 || echo 'TCG or KVM'))"
else
  # The appliance's units in their boot order (the ones Metal3 needs).
  agent_port=5000
  root_metal3 "$root"
  unit_pids=("${UNIT_PIDS[@]}")
  on() { chroot "$root" /bin/sh -c "export KUBECONFIG=/etc/kubernetes/admin.conf; $*"; }
  # The appliance processes' resident memory (MiB; the units' processes and their children) and their CPU
  # time against the time of the host's CPUs (jiffies), in /proc/stat's shape.
  sample() {
    python3 - "$root/proc" "${unit_pids[@]}" <<'PY'
import os, sys
# This PID namespace's /proc (the one this script sees is the host's).
proc, units = sys.argv[1], {int(p) for p in sys.argv[2:]}
def ancestry(pid):
    seen = []
    while pid > 1:
        seen.append(pid)
        try:
            pid = int(open(f"{proc}/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return seen
rss = cpu = 0
for p in os.listdir(proc):
    if not p.isdigit() or not units & set(ancestry(int(p))):
        continue
    try:
        fields = open(f"{proc}/{p}/stat").read().rsplit(")", 1)[1].split()
        rss += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        cpu += int(fields[11]) + int(fields[12])
    except OSError:
        pass
total = sum(int(x) for x in open("/proc/stat").readline().split()[1:8])
print(rss >> 20)
print(f"cpu {cpu} 0 0 {total - cpu} 0 0 0")
PY
  }
  alive() { for p in "${unit_pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a unit ended (logs in $bench)" >&2; return 1; }; done; }
  as_root=
  where="the appliance's root on this host's $(nproc) cores (chroot, no VM)"
fi

ready=
for _ in $(seq 1 1800); do
  if curl -ksf --max-time 5 "https://127.0.0.1:$agent_port/readyz" 2>/dev/null \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["services"]; sys.exit(0 if s["ironic"]["state"]=="ok" and s["baremetal-operator"]["state"]=="ok" else 1)' 2>/dev/null; then
    ready=1; break
  fi
  alive || break
  sleep 1
done
[ -n "$ready" ] || { echo "bench-metal3-scale: Ironic and BMO never ready (see the logs in $bench)" >&2; exit 1; }
# Idle: a minute after Metal3 is ready, nothing asked of it.
sleep 60
# A sample's first line, taken without `| head -1`: head ends before the writer may have finished, whose
# SIGPIPE then fails the pipeline and, with pipefail, the run (it ended two runs at 723 and 778 s).
idle=$(sample)
idle=${idle%%$'\n'*}
echo "memory used at idle (Kubernetes, BMO, Ironic, agent): ${idle} MiB"

# The stand-in ISO, uploaded over the BPA REST API; the hosts name it where the BMC on this host reaches it.
head -c 1048576 /dev/urandom > "$bench/live.iso"
token=$(on "$as_root cat /etc/foothold/token")
records="https://127.0.0.1:$agent_port/v1/baremetalcluster/foothold/scale/os_images"
curl -ksfS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d "{\"image_name\": \"live.iso\", \"image_length\": 1048576, \"sha256\": \"$(sha256sum "$bench/live.iso" | cut -d' ' -f1)\"}" \
  "$records" > /dev/null
curl -ksfS -H "Authorization: Bearer $token" -X PATCH -H 'Upload-Offset: 0' --data-binary "@$bench/live.iso" \
  "$records/live.iso" > /dev/null
sed -i "s/AGENT_PORT/$agent_port/" "$bench/hosts.yaml"

counts() {
  on "kubectl -n scale get bmh -o jsonpath='{range .items[*]}{.status.provisioning.state}{\"\\n\"}{end}'" \
    | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}'
}
: > "$bench/progress.log"
t0=$(now)
on "kubectl apply -f - > /dev/null" < "$bench/hosts.yaml"
available=timeout
provisioned=timeout
peak=$idle
first=$(sample | tail -1)
deadline=$(( $(date +%s) + ${LIMIT_SECONDS:-3600} ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  s=$(sample)
  mem=${s%%$'\n'*}
  [ "$mem" -gt "$peak" ] && peak=$mem
  c=$(counts)
  echo "$(secs "$t0" "$(now)") s: $c mem ${mem} MiB" >> "$bench/progress.log"
  n_prov=$(echo "$c" | grep -oE 'provisioned=[0-9]+' | cut -d= -f2 || true)
  n_avail=$(echo "$c" | tr ' ' '\n' | awk -F= '$1 == "available" || $1 == "provisioning" || $1 == "provisioned" {n += $2} END {print n + 0}')
  if [ "$available" = timeout ] && [ "${n_avail:-0}" -ge "$hosts" ]; then available=$(secs "$t0" "$(now)"); fi
  if [ "${n_prov:-0}" -ge "$hosts" ]; then provisioned=$(secs "$t0" "$(now)"); break; fi
  sleep 10
done
last=$(sample | tail -1)
cpu=$(printf '%s\n%s\n' "$first" "$last" | awk '{busy=$2+$3+$4+$7+$8+$9; total=busy+$5+$6} NR==1 {b=busy; t=total} NR==2 {printf "%.0f", 100 * (busy - b) / (total - t)}')

echo "Metal3 on the appliance, $hosts hosts behind sushy-tools' fake BMC: $where"
printf '%-52s %s\n' "memory used at idle (Kubernetes, BMO, Ironic, agent)" "${idle} MiB (target <= 3072)"
printf '%-52s %s\n' "hosts applied → all available or beyond" "${available} s"
if [ "$provisioned" = timeout ]; then
  printf '%-52s %s\n' "hosts applied → all provisioned" "not within ${LIMIT_SECONDS:-3600} s (target <= 900); then: $c"
else
  printf '%-52s %s\n' "hosts applied → all provisioned" "${provisioned} s (target <= 900)"
fi
printf '%-52s %s\n' "peak memory used meanwhile" "${peak} MiB (target <= 4096)"
printf '%-52s %s\n' "mean CPU busy meanwhile (of all CPUs)" "${cpu} %"
if [ "$mode" = native ]; then
  # Where the CPU went: each unit's process and the fake BMC (outside the appliance), in CPU seconds since start.
  python3 - "$root/proc" "${unit_pids[@]}" "$sushy_pid" <<'PY'
import os, sys
proc, pids = sys.argv[1], sys.argv[2:]
hz = os.sysconf("SC_CLK_TCK")
parts = []
for p in pids:
    try:
        stat = open(f"{proc}/{p}/stat").read()
    except OSError:
        continue
    fields = stat.rsplit(")", 1)[1].split()
    name = open(f"{proc}/{p}/cmdline").read().split("\0")[0].rsplit("/", 1)[-1]
    if name.startswith("python"):
        name = open(f"{proc}/{p}/cmdline").read().split("\0")[1].rsplit("/", 1)[-1]
    parts.append(f"{name} {(int(fields[11]) + int(fields[12])) / hz:.0f} s")
print("CPU time since start: " + ", ".join(parts))
PY
fi
# What the BMCs were asked, from the fake BMC's request log: a configuration that calls them more shows here
# before anywhere else (the hosts' ids folded, so each kind of call is one line).
python3 - "$bench/bmc.log" "$hosts" <<'PY'
import collections, re, sys
path, hosts = sys.argv[1], int(sys.argv[2])
kinds = collections.Counter()
for line in open(path, errors="replace"):
    m = re.search(r'"(GET|POST|PATCH|PUT|DELETE) (\S+) HTTP/[\d.]+" (\d+)', line)
    if m:
        route = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "{id}", m[2])
        kinds[f"{m[1]} {route} {m[3]}"] += 1
total = sum(kinds.values())
print(f"calls the fake BMC answered: {total} ({total / hosts:.1f} a host); the most frequent:")
for kind, n in kinds.most_common(8):
    print(f"  {n:8d}  {n / hosts:6.1f} a host  {kind}")
PY
if [ "$mode" = native ]; then
  # Where a host's time went: how long hosts stayed in each provisioning state, from BMO's log.
  python3 scripts/bmo-state-times.py "$bench/baremetal-operator.log"
fi
python3 scripts/plot-progress.py "$bench/progress.log" "$bench/progress.svg" \
  "Metal3 on the appliance ($mode): $hosts hosts in each state over time"
echo "progress: $bench/progress.log, plotted in $bench/progress.svg"
