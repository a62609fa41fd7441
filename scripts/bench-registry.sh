#!/usr/bin/env bash
# Registry benchmark (not a test): foothold-agent against CNCF distribution (Debian docker-registry) and nginx
# serving the same blob file with sendfile, all on 127.0.0.1 in one run. Prints medians and ratios.
#   RUNS=5 scripts/bench-registry.sh          (BLOB_MIB=200 IMAGE_MIB=1024 CONCURRENCY=64 by default;
#   ONLY_GET=1 skips the push/pull part: skopeo push, skopeo and ctr pulls)
# The agent runs three ways: as it ships (--sendfile remote: these clients are on this host, so bodies are
# copied to them through a buffer), with --sendfile always (bodies by sendfile, as remote clients get them) and
# with --sendfile never (bodies from memory maps, as under TLS). Pulls go to disk (dir: under the work
# directory) and to a sink (dir: in /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
BLOB_MIB=${BLOB_MIB:-200}
IMAGE_MIB=${IMAGE_MIB:-1024}
CONCURRENCY=${CONCURRENCY:-64}

. scripts/bench-common.sh
bench_setup skopeo curl nginx docker-registry containerd
trap 'bench_cleanup; rm -rf /dev/shm/foothold-bench-ctr /dev/shm/foothold-bench-pulled' EXIT

# skopeo remembers where blobs live and would mount instead of uploading on later runs.
forget_blob_locations() { rm -f /var/lib/containers/cache/blob-info-cache-v1.* "$HOME"/.local/share/containers/cache/blob-info-cache-v1.* 2>/dev/null || true; }

echo "# generating data: ${BLOB_MIB} MiB blob, ${IMAGE_MIB} MiB 5-layer image"
make_random_file "$work/files/blob" "$BLOB_MIB" > "$work/blob.digest"
make_layout "$work/layout" "$IMAGE_MIB" 5 bench
digest=$(cat "$work/blob.digest")

# The registries under test: name -> how to start one, fresh.
start_reg() {
  case $1 in
    agent) start_agent_at "$work/agent-data"; PORT=$AGENT_PORT; PID=$AGENT_PID ;;
    sendfile) start_agent_at "$work/sendfile-data" --sendfile always; PORT=$AGENT_PORT; PID=$AGENT_PID ;;
    mapped) start_agent_at "$work/mapped-data" --sendfile never; PORT=$AGENT_PORT; PID=$AGENT_PID ;;
    dist) start_dist_at "$work/dist-data"; PORT=$DIST_PORT; PID=$DIST_PID ;;
  esac
}
stop_reg() { kill "$1"; wait "$1" 2>/dev/null || true; }

upload_blob() {  # $1 base URL: two-step upload of the blob file
  loc=$(curl -sf -X POST -D - -o /dev/null "$1/v2/bench/blob/blobs/uploads/" | tr -d '\r' | awk -F': ' 'tolower($1)=="location"{print $2}')
  case "$loc" in http*) ;; *) loc="$1$loc" ;; esac
  sep='?'; case "$loc" in *\?*) sep='&' ;; esac
  curl -sf -X PUT -H 'Content-Type: application/octet-stream' --data-binary @"$work/files/blob" "$loc${sep}digest=$digest" -o /dev/null
}

start_nginx "$work/files"
wait_http "http://127.0.0.1:$NGINX_PORT/blob"
declare -A port pid
port[nginx]=$NGINX_PORT
for name in agent sendfile mapped dist; do
  start_reg $name; port[$name]=$PORT; pid[$name]=$PID
  upload_blob "http://127.0.0.1:$PORT"
done
url() { if [ "$1" = nginx ]; then echo "http://127.0.0.1:${port[nginx]}/blob"; else echo "http://127.0.0.1:${port[$1]}/v2/bench/blob/blobs/$digest"; fi; }

get_speed() { curl -sf -o /dev/null -w '%{speed_download}\n' "$1"; }  # bytes/s; fails on an HTTP error
echo "# single GET of the ${BLOB_MIB} MiB blob, median of $RUNS (MiB/s)"
declare -A single
for name in nginx agent sendfile mapped dist; do
  get_speed "$(url $name)" >/dev/null  # warm the page cache
  single[$name]=$(for _ in $(seq "$RUNS"); do get_speed "$(url $name)"; done | median | awk '{printf "%.0f", $1/1048576}')
  echo "  $name ${single[$name]}"
done

echo "# $CONCURRENCY concurrent GETs of the blob, median of $RUNS (aggregate MiB/s)"
concurrent() {  # $1 url -> aggregate MiB/s
  cfg="$work/parallel.cfg"; : > "$cfg"
  for _ in $(seq "$CONCURRENCY"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$1" >> "$cfg"; done
  t0=$(date +%s.%N)
  got=$(curl -sf --no-progress-meter --parallel --parallel-immediate --parallel-max "$CONCURRENCY" -w '%{size_download}\n' -K "$cfg" | awk '{s+=$1} END {printf "%.0f", s}')
  t1=$(date +%s.%N)
  [ "$got" = "$((CONCURRENCY * BLOB_MIB * 1048576))" ] || { echo "concurrent GETs of $1 returned $got bytes" >&2; exit 1; }
  awk -v n="$CONCURRENCY" -v m="$BLOB_MIB" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f\n", n*m/(b-a)}'
}
declare -A conc rss
for name in nginx agent sendfile mapped; do
  conc[$name]=$(for _ in $(seq "$RUNS"); do concurrent "$(url $name)"; done | median)
  [ "$name" = nginx ] || rss[$name]=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/${pid[$name]}/status")
  echo "  $name ${conc[$name]}"
done
for name in agent sendfile mapped dist; do stop_reg "${pid[$name]}"; done

declare -A push pull sink ctrp ctrs_sink
if [ -n "${ONLY_GET:-}" ]; then for n in agent sendfile mapped dist; do push[$n]=1; pull[$n]=1; sink[$n]=1; ctrp[$n]=1; ctrs_sink[$n]=1; done; else
echo "# skopeo push, then skopeo and ctr pulls to disk and to a sink, of the ${IMAGE_MIB} MiB image, fresh registry each run, the"
echo "# registries taking turns within each round (a drift in the machine's speed touches them alike), median of $RUNS (MiB/s)"
rate() { awk -v m="$IMAGE_MIB" -v a="$1" -v b="$2" 'BEGIN {print m/(b-a)}'; }
# ctr_rate DIR REF : a containerd with a fresh root in DIR fetches REF (`ctr content fetch`: every blob, nothing
# unpacked) over plain HTTP; sets CTR_RATE (MiB/s). The daemon's start and stop are outside the timing.
ctr_rate() {
  local dir=$1 ref=$2 t0 t1 got
  rm -rf "$dir"
  start_containerd "$dir"; wait_containerd "$dir"
  t0=$(date +%s.%N)
  ctr_fetch "$dir" "$ref" --plain-http
  t1=$(date +%s.%N)
  kill "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null || true
  got=$(du -sm "$dir/root/io.containerd.content.v1.content/blobs" | cut -f1)
  [ "$got" -ge "$IMAGE_MIB" ] || { echo "ctr fetched $got MiB of $ref" >&2; exit 1; }
  rm -rf "$dir"
  CTR_RATE=$(rate "$t0" "$t1")
}
declare -A pushes pulls sinks ctrs ctr_sinks
for i in $(seq "$RUNS"); do
  for name in agent sendfile mapped dist; do
    start_reg $name
    forget_blob_locations
    t0=$(date +%s.%N)
    skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:bench" "docker://127.0.0.1:$PORT/bench/image:v$i" >/dev/null
    t1=$(date +%s.%N)
    rm -rf "$work/pulled"
    skopeo --insecure-policy copy -q --src-tls-verify=false "docker://127.0.0.1:$PORT/bench/image:v$i" "dir:$work/pulled" >/dev/null
    t2=$(date +%s.%N)
    rm -rf "$work/pulled" /dev/shm/foothold-bench-pulled
    skopeo --insecure-policy copy -q --src-tls-verify=false "docker://127.0.0.1:$PORT/bench/image:v$i" "dir:/dev/shm/foothold-bench-pulled" >/dev/null
    t3=$(date +%s.%N)
    rm -rf /dev/shm/foothold-bench-pulled
    pushes[$name]+="$(rate "$t0" "$t1") "; pulls[$name]+="$(rate "$t1" "$t2") "; sinks[$name]+="$(rate "$t2" "$t3") "
    ctr_rate "$work/ctr" "127.0.0.1:$PORT/bench/image:v$i"; ctrs[$name]+="$CTR_RATE "
    ctr_rate /dev/shm/foothold-bench-ctr "127.0.0.1:$PORT/bench/image:v$i"; ctr_sinks[$name]+="$CTR_RATE "
    stop_reg "$PID"
  done
done
for name in agent sendfile mapped dist; do
  # shellcheck disable=SC2086 # the lists are words on purpose
  push[$name]=$(printf '%s\n' ${pushes[$name]} | median | awk '{printf "%.0f", $1}')
  # shellcheck disable=SC2086
  pull[$name]=$(printf '%s\n' ${pulls[$name]} | median | awk '{printf "%.0f", $1}')
  # shellcheck disable=SC2086
  sink[$name]=$(printf '%s\n' ${sinks[$name]} | median | awk '{printf "%.0f", $1}')
  # shellcheck disable=SC2086
  ctrp[$name]=$(printf '%s\n' ${ctrs[$name]} | median | awk '{printf "%.0f", $1}')
  # shellcheck disable=SC2086
  ctrs_sink[$name]=$(printf '%s\n' ${ctr_sinks[$name]} | median | awk '{printf "%.0f", $1}')
  echo "  $name push ${push[$name]} pull ${pull[$name]} pull-to-sink ${sink[$name]} ctr ${ctrp[$name]} ctr-to-sink ${ctrs_sink[$name]}"
done
fi

echo
echo "cores: $(nproc); runs: $RUNS; foothold = as shipped (--sendfile remote: buffered to these local clients),"
echo "sendfile = --sendfile always, mapped = --sendfile never"
printf '%-34s %9s %9s %9s %9s %9s   %s\n' "measure (MiB/s)" foothold sendfile mapped distrib nginx "ratios (target)"
row() { printf '%-34s %9s %9s %9s %9s %9s   %s\n' "$@"; }
row "GET ${BLOB_MIB} MiB blob" "${single[agent]}" "${single[sendfile]}" "${single[mapped]}" "${single[dist]}" "${single[nginx]}" \
  "foothold/nginx $(ratio "${single[agent]}" "${single[nginx]}") (>=1.0), foothold/distribution $(ratio "${single[agent]}" "${single[dist]}") (>=1.3); sendfile/nginx $(ratio "${single[sendfile]}" "${single[nginx]}")"
row "$CONCURRENCY concurrent GETs (aggregate)" "${conc[agent]}" "${conc[sendfile]}" "${conc[mapped]}" "-" "${conc[nginx]}" \
  "foothold/nginx $(ratio "${conc[agent]}" "${conc[nginx]}") (>=1.0); sendfile/nginx $(ratio "${conc[sendfile]}" "${conc[nginx]}")"
row "skopeo push ${IMAGE_MIB} MiB 5 layers" "${push[agent]}" "${push[sendfile]}" "${push[mapped]}" "${push[dist]}" "-" "foothold/distribution $(ratio "${push[agent]}" "${push[dist]}") (>=1.2)"
row "skopeo pull to disk" "${pull[agent]}" "${pull[sendfile]}" "${pull[mapped]}" "${pull[dist]}" "-" \
  "foothold/distribution $(ratio "${pull[agent]}" "${pull[dist]}") (>=1.0); sendfile $(ratio "${pull[sendfile]}" "${pull[dist]}")"
row "skopeo pull to a sink (/dev/shm)" "${sink[agent]}" "${sink[sendfile]}" "${sink[mapped]}" "${sink[dist]}" "-" \
  "foothold/distribution $(ratio "${sink[agent]}" "${sink[dist]}") (>=1.0); sendfile $(ratio "${sink[sendfile]}" "${sink[dist]}")"
row "ctr pull to disk" "${ctrp[agent]}" "${ctrp[sendfile]}" "${ctrp[mapped]}" "${ctrp[dist]}" "-" \
  "foothold/distribution $(ratio "${ctrp[agent]}" "${ctrp[dist]}") (>=1.0); sendfile $(ratio "${ctrp[sendfile]}" "${ctrp[dist]}")"
row "ctr pull to a sink (/dev/shm)" "${ctrs_sink[agent]}" "${ctrs_sink[sendfile]}" "${ctrs_sink[mapped]}" "${ctrs_sink[dist]}" "-" \
  "foothold/distribution $(ratio "${ctrs_sink[agent]}" "${ctrs_sink[dist]}") (>=1.0); sendfile $(ratio "${ctrs_sink[sendfile]}" "${ctrs_sink[dist]}")"
echo "peak RSS over the GET benchmarks: foothold ${rss[agent]} MiB, sendfile ${rss[sendfile]} MiB, mapped ${rss[mapped]} MiB (target <= 64)"
