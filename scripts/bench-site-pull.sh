#!/usr/bin/env bash
# Site pull benchmark (not a test): N containerd instances (own roots, sockets and state under a temp dir) fetch
# the same multi-layer image through the mirror at once, from foothold-agent and from CNCF distribution (Debian
# docker-registry), on 127.0.0.1 in one run; the agent with --sendfile always (bodies by sendfile: what the nodes
# of a site, other hosts, get from it as shipped; the row the targets apply to) and as shipped (--sendfile remote:
# these stand-in nodes are on its host, so they get bodies copied through a buffer, as a local client would).
# For each N it prints the aggregate MiB/s, p50 and p99 time to a complete pull, and the registry's peak RSS and
# CPU during it.
#   scripts/bench-site-pull.sh           (IMAGE_MIB=1024 LAYERS=8 NODES="1 8 32" by default; each node writes
#                                         the image into its own content store: N x IMAGE_MIB of disk at once;
#                                         NODES_DIR=/dev/shm puts the nodes' stores in memory, a sink)
# A pull is `ctr content fetch` by the image's original name (docker.io/bench/site:v1) with a hosts.toml mirror
# in front, as a compute node's containerd pulls through the appliance: every layer and the manifest, nothing
# unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE_MIB=${IMAGE_MIB:-1024}
LAYERS=${LAYERS:-8}
NODES=${NODES:-"1 8 32"}
NODES_DIR=${NODES_DIR:-}

. scripts/bench-common.sh
bench_setup skopeo curl docker-registry containerd
trap 'bench_cleanup; rm -rf "${NODES_DIR:-$work}/foothold-bench-nodes"' EXIT

echo "# generating data: one ${IMAGE_MIB} MiB image of ${LAYERS} layers"
make_layout "$work/layout" "$IMAGE_MIB" "$LAYERS" site

# The mirror as foothold-agent writes it for nodes (`mirror-config`), pointing at $1.
mirror_hosts() { rm -rf "$2"; "$AGENT" mirror-config --for containerd --registries docker.io --endpoint "$1" --out "$2" >/dev/null; }

# The registry's CPU seconds so far (user + system).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }

# pull_round NAME PID HOSTS N : N containerds fetch the image at once; prints one result line.
pull_round() {
  local name=$1 pid=$2 hosts=$3 n=$4 dir="${NODES_DIR:-$work}/foothold-bench-nodes" i
  rm -rf "$dir"; mkdir -p "$dir"
  local ctrd=()
  for i in $(seq "$n"); do
    start_containerd "$dir/$i"; ctrd+=("$CTRD_PID")
  done
  for i in $(seq "$n"); do wait_containerd "$dir/$i"; done
  echo 5 > "/proc/$pid/clear_refs"  # resets the peak RSS (VmHWM) to the current RSS
  local cpu0 t0 t1 cpu1
  cpu0=$(cpu_s "$pid"); t0=$(date +%s.%N)
  local fetches=()
  for i in $(seq "$n"); do
    ( s=$(date +%s.%N)
      ctr --address "$dir/$i/sock" --namespace bench content fetch --hosts-dir "$hosts" docker.io/bench/site:v1 >"$dir/$i/fetch.log" 2>&1
      e=$(date +%s.%N); echo "$s $e" > "$dir/$i/times" ) & fetches+=("$!")
  done
  local failed=0
  for p in "${fetches[@]}"; do wait "$p" || failed=1; done
  t1=$(date +%s.%N); cpu1=$(cpu_s "$pid")
  [ "$failed" = 0 ] || { echo "a fetch from $name failed:" >&2; cat "$dir"/*/fetch.log >&2; exit 1; }
  for i in $(seq "$n"); do
    got=$(du -sm "$dir/$i/root/io.containerd.content.v1.content/blobs" | cut -f1)
    [ "$got" -ge "$IMAGE_MIB" ] || { echo "node $i of $name holds $got MiB after its fetch" >&2; exit 1; }
  done
  local hwm durations
  hwm=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")
  durations=$(cat "$dir"/*/times | awk '{print $2 - $1}' | sort -g)
  for p in "${ctrd[@]}"; do kill "$p"; done
  for p in "${ctrd[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
  # name, N, aggregate MiB/s, p50 s, p99 s (nearest rank), peak RSS MiB, CPU (cores busy on average)
  printf '%s %s %s %s %s %s %s\n' "$name" "$n" \
    "$(awk -v n="$n" -v m="$IMAGE_MIB" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n*m/(b-a)}')" \
    "$(echo "$durations" | awk '{a[NR]=$1} END {i=int(NR*0.50+0.999); printf "%.2f", a[i<1?1:i]}')" \
    "$(echo "$durations" | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); printf "%.2f", a[i<1?1:i]}')" \
    "$hwm" \
    "$(awk -v a="$cpu0" -v b="$cpu1" -v s="$t0" -v e="$t1" 'BEGIN {printf "%.2f", (b-a)/(e-s)}')"
}

echo "# pushing the image to both registries"
start_agent_at "$work/sendfile-data" --sendfile always; SENDFILE_PORT=$AGENT_PORT; SENDFILE_PID=$AGENT_PID
start_agent_at "$work/agent-data"
start_dist_at "$work/dist-data"
# The agent keeps a mirrored image under its original name (containerd sends ?ns=docker.io); distribution
# ignores the query, so it holds it without the registry's name.
for p in $AGENT_PORT $SENDFILE_PORT; do
  skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:site" "docker://127.0.0.1:$p/docker.io/bench/site:v1"
done
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:site" "docker://127.0.0.1:$DIST_PORT/bench/site:v1"
mirror_hosts "http://127.0.0.1:$AGENT_PORT" "$work/hosts-agent"
mirror_hosts "http://127.0.0.1:$DIST_PORT" "$work/hosts-dist"
mirror_hosts "http://127.0.0.1:$SENDFILE_PORT" "$work/hosts-sendfile"

results="$work/results"; : > "$results"
for n in $NODES; do
  for name in agent sendfile dist; do
    case $name in agent) pid=$AGENT_PID ;; sendfile) pid=$SENDFILE_PID ;; dist) pid=$DIST_PID ;; esac
    line=$(pull_round "$name" "$pid" "$work/hosts-$name" "$n")
    echo "  $line"; echo "$line" >> "$results"
  done
done

echo
echo "cores: $(nproc); image: ${IMAGE_MIB} MiB in ${LAYERS} layers; nodes' stores in ${NODES_DIR:-$work}; one run per N"
printf '%-6s %-19s %10s %8s %8s %9s %6s   %s\n' N registry "MiB/s" "p50 s" "p99 s" "peak RSS" CPU "ratios (target)"
for n in $NODES; do
  a=$(awk -v n="$n" '$1=="agent" && $2==n' "$results"); d=$(awk -v n="$n" '$1=="dist" && $2==n' "$results")
  s=$(awk -v n="$n" '$1=="sendfile" && $2==n' "$results")
  read -r _ _ am ap50 ap99 arss acpu <<<"$a"; read -r _ _ dm dp50 dp99 drss dcpu <<<"$d"
  read -r _ _ sm sp50 sp99 srss scpu <<<"$s"
  # The nodes of a site are other hosts, which the agent serves by sendfile: that row stands for a site.
  printf '%-6s %-19s %10s %8s %8s %6s MiB %6s   %s\n' "$n" "foothold (sendfile)" "$sm" "$sp50" "$sp99" "$srss" "$scpu" \
    "aggregate $(ratio "$sm" "$dm")x distribution (>=1.2 at 32), p99/p50 $(ratio "$sp99" "$sp50") (<=1.5)"
  printf '%-6s %-19s %10s %8s %8s %6s MiB %6s   %s\n' "$n" "foothold (local)" "$am" "$ap50" "$ap99" "$arss" "$acpu" \
    "aggregate $(ratio "$am" "$dm")x distribution, p99/p50 $(ratio "$ap99" "$ap50")"
  printf '%-6s %-19s %10s %8s %8s %6s MiB %6s   %s\n' "$n" distribution "$dm" "$dp50" "$dp99" "$drss" "$dcpu" \
    "p99/p50 $(ratio "$dp99" "$dp50")"
done
