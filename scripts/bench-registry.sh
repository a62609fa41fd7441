#!/usr/bin/env bash
# Registry benchmark (not a test): foothold-agent against CNCF distribution (Debian docker-registry) and nginx
# serving the same blob file with sendfile, all on 127.0.0.1 in one run. Prints medians and ratios.
#   RUNS=5 scripts/bench-registry.sh          (BLOB_MIB=200 IMAGE_MIB=1024 CONCURRENCY=64 by default;
#   ONLY_GET=1 skips the skopeo push/pull part)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
BLOB_MIB=${BLOB_MIB:-200}
IMAGE_MIB=${IMAGE_MIB:-1024}
CONCURRENCY=${CONCURRENCY:-64}

. scripts/bench-common.sh
bench_setup skopeo curl nginx docker-registry

# skopeo remembers where blobs live and would mount instead of uploading on later runs.
forget_blob_locations() { rm -f /var/lib/containers/cache/blob-info-cache-v1.* "$HOME"/.local/share/containers/cache/blob-info-cache-v1.* 2>/dev/null || true; }

echo "# generating data: ${BLOB_MIB} MiB blob, ${IMAGE_MIB} MiB 5-layer image"
make_random_file "$work/files/blob" "$BLOB_MIB" > "$work/blob.digest"
make_layout "$work/layout" "$IMAGE_MIB" 5 bench
digest=$(cat "$work/blob.digest")

start_agent() { start_agent_at "$work/agent-data"; }  # fresh data dir each time
stop_agent() { kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; }
start_dist() { start_dist_at "$work/dist-data"; }
stop_dist() { kill "$DIST_PID"; wait "$DIST_PID" 2>/dev/null || true; }

upload_blob() {  # $1 base URL: two-step upload of the blob file
  loc=$(curl -sf -X POST -D - -o /dev/null "$1/v2/bench/blob/blobs/uploads/" | tr -d '\r' | awk -F': ' 'tolower($1)=="location"{print $2}')
  case "$loc" in http*) ;; *) loc="$1$loc" ;; esac
  sep='?'; case "$loc" in *\?*) sep='&' ;; esac
  curl -sf -X PUT -H 'Content-Type: application/octet-stream' --data-binary @"$work/files/blob" "$loc${sep}digest=$digest" -o /dev/null
}

start_nginx "$work/files"
wait_http "http://127.0.0.1:$NGINX_PORT/blob"
start_agent; start_dist
upload_blob "http://127.0.0.1:$AGENT_PORT"; upload_blob "http://127.0.0.1:$DIST_PORT"

mib_s() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f", b / 1048576 / s}'; }
get_speed() { curl -sf -o /dev/null -w '%{speed_download}\n' "$1"; }  # bytes/s; fails on an HTTP error
echo "# single GET of the ${BLOB_MIB} MiB blob, median of $RUNS (MiB/s)"
declare -A single
for name in nginx agent dist; do
  case $name in nginx) url="http://127.0.0.1:$NGINX_PORT/blob" ;; agent) url="http://127.0.0.1:$AGENT_PORT/v2/bench/blob/blobs/$digest" ;; dist) url="http://127.0.0.1:$DIST_PORT/v2/bench/blob/blobs/$digest" ;; esac
  get_speed "$url" >/dev/null  # warm the page cache
  single[$name]=$(for _ in $(seq "$RUNS"); do get_speed "$url"; done | median | awk '{printf "%.0f", $1/1048576}')
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
declare -A conc
for name in nginx agent; do
  case $name in nginx) url="http://127.0.0.1:$NGINX_PORT/blob" ;; agent) url="http://127.0.0.1:$AGENT_PORT/v2/bench/blob/blobs/$digest" ;; esac
  conc[$name]=$(for _ in $(seq "$RUNS"); do concurrent "$url"; done | median)
  echo "  $name ${conc[$name]}"
done
agent_rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$AGENT_PID/status")
stop_agent; stop_dist

declare -A push pull
if [ -n "${ONLY_GET:-}" ]; then push=([agent]=0 [dist]=1); pull=([agent]=0 [dist]=1); else
echo "# skopeo push and pull of the ${IMAGE_MIB} MiB image, fresh registry each run, median of $RUNS (MiB/s)"
for name in agent dist; do
  pushes=(); pulls=()
  for i in $(seq "$RUNS"); do
    if [ $name = agent ]; then start_agent; port=$AGENT_PORT; else start_dist; port=$DIST_PORT; fi
    forget_blob_locations
    t0=$(date +%s.%N)
    skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layout:bench" "docker://127.0.0.1:$port/bench/image:v$i" >/dev/null
    t1=$(date +%s.%N)
    rm -rf "$work/pulled"
    skopeo --insecure-policy copy -q --src-tls-verify=false "docker://127.0.0.1:$port/bench/image:v$i" "dir:$work/pulled" >/dev/null
    t2=$(date +%s.%N)
    pushes+=("$(awk -v m="$IMAGE_MIB" -v a="$t0" -v b="$t1" 'BEGIN {print m/(b-a)}')")
    pulls+=("$(awk -v m="$IMAGE_MIB" -v a="$t1" -v b="$t2" 'BEGIN {print m/(b-a)}')")
    if [ $name = agent ]; then stop_agent; else stop_dist; fi
  done
  push[$name]=$(printf '%s\n' "${pushes[@]}" | median | awk '{printf "%.0f", $1}')
  pull[$name]=$(printf '%s\n' "${pulls[@]}" | median | awk '{printf "%.0f", $1}')
done
rm -rf "$work/pulled"
fi

echo
echo "cores: $(nproc); runs: $RUNS"
printf '%-34s %10s %10s %10s   %s\n' "measure (MiB/s)" foothold distrib nginx "ratios (target)"
printf '%-34s %10s %10s %10s   %s\n' "GET ${BLOB_MIB} MiB blob" "${single[agent]}" "${single[dist]}" "${single[nginx]}" \
  "agent/nginx $(ratio "${single[agent]}" "${single[nginx]}") (>=0.9), agent/distribution $(ratio "${single[agent]}" "${single[dist]}") (>=1.5)"
printf '%-34s %10s %10s %10s   %s\n' "skopeo push ${IMAGE_MIB} MiB 5 layers" "${push[agent]}" "${push[dist]}" "-" "agent/distribution $(ratio "${push[agent]}" "${push[dist]}") (>=1.2)"
printf '%-34s %10s %10s %10s   %s\n' "skopeo pull ${IMAGE_MIB} MiB 5 layers" "${pull[agent]}" "${pull[dist]}" "-" "agent/distribution $(ratio "${pull[agent]}" "${pull[dist]}") (>=1.0)"
printf '%-34s %10s %10s %10s   %s\n' "$CONCURRENCY concurrent GETs (aggregate)" "${conc[agent]}" "-" "${conc[nginx]}" "agent/nginx $(ratio "${conc[agent]}" "${conc[nginx]}") (>=0.8)"
echo "agent peak RSS during the GET benchmarks: $((agent_rss_kib / 1024)) MiB (target <= 64)"
