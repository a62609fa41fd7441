#!/usr/bin/env bash
# Site pull benchmark (not a test): N containerd instances (own roots, sockets and state under a temp dir) fetch
# the same multi-layer image through the mirror at once, from foothold-agent and from CNCF distribution (Debian
# docker-registry), on 127.0.0.1 in one run; the agent with --sendfile always (bodies by sendfile: what the nodes
# of a site, other hosts, get from it as shipped; the row the targets apply to) and as shipped (--sendfile remote:
# these stand-in nodes are on its host, so they get bodies copied through a buffer, as a local client would).
# Each round starts a fresh process of each registry and runs two waves of N fresh nodes against it: its first
# pull, then the same pull again. For each N and wave it prints the aggregate MiB/s, p50 and p99 time to a
# complete pull, the registry's peak RSS and CPU, and the machine's idle share: medians over ROUNDS rounds, in
# which the registries take turns.
#   scripts/bench-site-pull.sh           (IMAGE_MIB=1024 LAYERS=8 NODES="1 8 32" ROUNDS=3 by default; each node
#                                         writes the image into its own content store: N x IMAGE_MIB of disk at
#                                         once; NODES_DIR=/dev/shm puts the nodes' stores in memory, a sink)
# A pull is `ctr content fetch` by the image's original name (docker.io/bench/site:v1) with a hosts.toml mirror
# in front, as a compute node's containerd pulls through the appliance: every layer and the manifest, nothing
# unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE_MIB=${IMAGE_MIB:-1024}
LAYERS=${LAYERS:-8}
NODES=${NODES:-"1 8 32"}
NODES_DIR=${NODES_DIR:-}
ROUNDS=${ROUNDS:-3}

. scripts/bench-common.sh
bench_setup skopeo curl docker-registry containerd
trap 'bench_cleanup; rm -rf "${NODES_DIR:-$work}/foothold-bench-nodes"' EXIT

echo "# generating data: one ${IMAGE_MIB} MiB image of ${LAYERS} layers"
make_layout "$work/layout" "$IMAGE_MIB" "$LAYERS" site

# The mirror as foothold-agent writes it for nodes (`mirror-config`), pointing at $1.
mirror_hosts() { rm -rf "$2"; "$AGENT" mirror-config --for containerd --registries docker.io --endpoint "$1" --out "$2" >/dev/null; }

# The registry's CPU seconds so far (user + system).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
# The machine's idle and total CPU time so far, in ticks (idle counts iowait too).
machine_ticks() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= NF; i++) t += $i; print $5 + $6, t}' /proc/stat; }

# serve NAME : a fresh process of NAME's registry (agent: as shipped; sendfile: the agent with --sendfile always;
# dist: distribution) on the image pushed to it, and the nodes' mirror of it in $work/hosts; sets REG_PID.
serve() {
  local port
  case $1 in
    agent) serve_agent_at "$work/agent-data"; REG_PID=$AGENT_PID; port=$AGENT_PORT ;;
    sendfile) serve_agent_at "$work/agent-data" --sendfile always; REG_PID=$AGENT_PID; port=$AGENT_PORT ;;
    dist) serve_dist_at "$work/dist-data"; REG_PID=$DIST_PID; port=$DIST_PORT ;;
  esac
  mirror_hosts "http://127.0.0.1:$port" "$work/hosts"
}

# pull_round NAME N : a fresh process of NAME's registry serves two waves of N containerds (fresh ones each wave)
# fetching the image at once: the first pull of a site, then the same pull from a registry that has served one
# (distribution keeps the memory the first wave grew; its peak RSS for the second is counted from the RSS it
# held at the start). Appends one line per wave to $results. It runs in this shell, so a failure's exit trap
# stops every process it started.
pull_round() {
  local name=$1 n=$2
  serve "$name"
  pull_wave first "$name" "$n" "$REG_PID"
  echo 5 > "/proc/$REG_PID/clear_refs"  # resets the peak RSS (VmHWM) to the current RSS
  pull_wave again "$name" "$n" "$REG_PID"
  kill "$REG_PID"; wait "$REG_PID" 2>/dev/null || true
}
pull_wave() {
  local wave=$1 name=$2 n=$3 pid=$4 dir="${NODES_DIR:-$work}/foothold-bench-nodes" i
  rm -rf "$dir"; mkdir -p "$dir"
  local ctrd=()
  for i in $(seq "$n"); do
    start_containerd "$dir/$i"; ctrd+=("$CTRD_PID")
  done
  for i in $(seq "$n"); do wait_containerd "$dir/$i"; done
  local cpu0 t0 t1 cpu1 m0 m1
  cpu0=$(cpu_s "$pid"); m0=$(machine_ticks); t0=$(date +%s.%N)
  local fetches=()
  for i in $(seq "$n"); do
    ( s=$(date +%s.%N)
      ctr_fetch "$dir/$i" docker.io/bench/site:v1 --hosts-dir "$work/hosts"
      e=$(date +%s.%N); echo "$s $e" > "$dir/$i/times" ) & fetches+=("$!")
  done
  local failed=0
  for p in "${fetches[@]}"; do wait "$p" || failed=1; done
  t1=$(date +%s.%N); cpu1=$(cpu_s "$pid"); m1=$(machine_ticks)
  [ "$failed" = 0 ] || { echo "a fetch from $name failed (above)" >&2; exit 1; }
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
  # wave, name, N, aggregate MiB/s, p50 s, p99 s (nearest rank), peak RSS MiB, CPU (cores busy on average),
  # the machine's idle share (%): with every core busy the registry's CPU is what it takes from the nodes
  local line
  line=$(printf '%s %s %s %s %s %s %s %s %s' "$wave" "$name" "$n" \
    "$(awk -v n="$n" -v m="$IMAGE_MIB" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n*m/(b-a)}')" \
    "$(echo "$durations" | awk '{a[NR]=$1} END {i=int(NR*0.50+0.999); printf "%.2f", a[i<1?1:i]}')" \
    "$(echo "$durations" | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); printf "%.2f", a[i<1?1:i]}')" \
    "$hwm" \
    "$(awk -v a="$cpu0" -v b="$cpu1" -v s="$t0" -v e="$t1" 'BEGIN {printf "%.2f", (b-a)/(e-s)}')" \
    "$(echo "$m0 $m1" | awk '{printf "%.0f", 100 * ($3 - $1) / ($4 - $2)}')")
  echo "  $line"; echo "$line" >> "$results"
}

echo "# pushing the image to both registries"
start_agent_at "$work/agent-data"
# The agent keeps a mirrored image under its original name (containerd sends ?ns=docker.io); distribution
# ignores the query, so it holds it without the registry's name.
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:site" "docker://127.0.0.1:$AGENT_PORT/docker.io/bench/site:v1"
start_dist_at "$work/dist-data"
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:site" "docker://127.0.0.1:$DIST_PORT/bench/site:v1"
for p in "$AGENT_PID" "$DIST_PID"; do kill "$p"; wait "$p" 2>/dev/null || true; done

results="$work/results"; : > "$results"
for round in $(seq "$ROUNDS"); do
  echo "# round $round of $ROUNDS"
  for n in $NODES; do
    for name in agent sendfile dist; do pull_round "$name" "$n"; done
  done
done

# med WAVE NAME N COLUMN : the median over the rounds of one column (4 = MiB/s ... 9 = idle) of NAME's results
# in WAVE at N, printed as that column is.
med() {
  local f; case $4 in 4|7|9) f=%.0f ;; *) f=%.2f ;; esac
  awk -v w="$1" -v name="$2" -v n="$3" -v c="$4" '$1==w && $2==name && $3==n {print $c}' "$results" | median |
    awk -v f="$f" '{printf f, $1}'
}
# round_ratios WAVE N : each round's aggregate of the agent with sendfile over distribution's in WAVE at N.
round_ratios() {
  paste <(awk -v w="$1" -v n="$2" '$1==w && $2=="sendfile" && $3==n {print $4}' "$results") \
        <(awk -v w="$1" -v n="$2" '$1==w && $2=="dist" && $3==n {print $4}' "$results") |
    awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1 / $2}'
}

echo
echo "cores: $(nproc); image: ${IMAGE_MIB} MiB in ${LAYERS} layers; nodes' stores in ${NODES_DIR:-$work}; medians of $ROUNDS rounds"
echo "first: a fresh registry's first pull; again: the same pull from it once more"
printf '%-6s %-6s %-19s %8s %7s %7s %9s %5s %5s   %s\n' N wave registry "MiB/s" "p50 s" "p99 s" "peak RSS" CPU idle "ratios (target)"
for n in $NODES; do
  for wave in first again; do
    for name in sendfile agent dist; do
      m=$(med $wave $name "$n" 4); p50=$(med $wave $name "$n" 5); p99=$(med $wave $name "$n" 6)
      rss=$(med $wave $name "$n" 7); cpu=$(med $wave $name "$n" 8); idle=$(med $wave $name "$n" 9)
      dm=$(med $wave dist "$n" 4)
      case $name in
        # The nodes of a site are other hosts, which the agent serves by sendfile: that row stands for a site.
        sendfile) label="foothold (sendfile)"
          note="aggregate $(ratio "$m" "$dm")x distribution (>=1.2 at 32; rounds: $(round_ratios $wave "$n")), p99/p50 $(ratio "$p99" "$p50") (<=1.5)" ;;
        agent) label="foothold (local)"; note="aggregate $(ratio "$m" "$dm")x distribution, p99/p50 $(ratio "$p99" "$p50")" ;;
        # With every core busy and the nodes' work per byte the same whoever serves it, what the nodes get is
        # what the registry leaves them: (cores - agent's CPU) / (cores - distribution's) is the ratio to expect.
        dist) label=distribution
          note="p99/p50 $(ratio "$p99" "$p50"); the CPU it leaves the nodes predicts $(awk -v c="$(nproc)" -v a="$(med $wave sendfile "$n" 8)" -v d="$cpu" 'BEGIN {printf "%.2f", (c-a)/(c-d)}')x" ;;
      esac
      printf '%-6s %-6s %-19s %8s %7s %7s %5s MiB %5s %4s%%   %s\n' "$n" $wave "$label" "$m" "$p50" "$p99" "$rss" "$cpu" "$idle" "$note"
    done
  done
done
