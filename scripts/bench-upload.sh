#!/usr/bin/env bash
# Upload benchmark (not a test): one 2 GiB file. sha256sum of it (the hash-bound limit on this CPU), upload
# through the BPA REST API in 64 MiB PATCH chunks, download through /files compared with nginx serving the
# same file. Prints medians and ratios.   RUNS=3 FILE_MIB=2048 CHUNK_MIB=64 scripts/bench-upload.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
FILE_MIB=${FILE_MIB:-2048}
CHUNK_MIB=${CHUNK_MIB:-64}
. scripts/bench-common.sh
bench_setup curl nginx
now() { date +%s.%N; }
rate() { awk -v m="$FILE_MIB" -v a="$1" -v b="$2" 'BEGIN {printf "%.0f\n", m/(b-a)}'; }

echo "# generating a ${FILE_MIB} MiB file"
mkdir -p "$work/files"
head -c $((FILE_MIB << 20)) /dev/urandom > "$work/files/node.img"
sha=$(sha256sum "$work/files/node.img" | cut -d' ' -f1)   # also warms the page cache

echo "# sha256sum, median of $RUNS (MiB/s)"
hash=$(for _ in $(seq "$RUNS"); do t0=$(now); sha256sum "$work/files/node.img" >/dev/null; rate "$t0" "$(now)"; done | median)
echo "  $hash"

echo "# upload in ${CHUNK_MIB} MiB PATCH chunks, fresh agent each run, median of $RUNS (MiB/s)"
echo tok > "$work/token"
uploads=()
for i in $(seq "$RUNS"); do
  rm -rf "$work/data"; port=$(free_port)
  "$AGENT" serve --listen "127.0.0.1:$port" --data "$work/data" --token-file "$work/token" 2>"$work/agent.log" & apid=$!; pids+=("$apid")
  wait_http "http://127.0.0.1:$port/healthz"
  base="http://127.0.0.1:$port/v1/baremetalcluster/bench/site/os_images"
  t0=$(now)
  curl -sf -o /dev/null -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' \
    -d "{\"image_name\":\"node.img\",\"image_length\":$((FILE_MIB << 20)),\"sha256\":\"$sha\"}" "$base"
  for ((off = 0; off < FILE_MIB; off += CHUNK_MIB)); do
    dd if="$work/files/node.img" bs=1M skip="$off" count="$CHUNK_MIB" status=none |
      curl -sf -o /dev/null -X PATCH -T - -H 'Authorization: Bearer tok' -H "Upload-Offset: $((off << 20))" "$base/node.img"
  done
  t1=$(now)
  curl -sf "$base/node.img" | grep -q '"upload_complete":true' || { echo "upload did not complete" >&2; exit 1; }
  uploads+=("$(rate "$t0" "$t1")")
  [ "$i" = "$RUNS" ] || { kill "$apid"; wait "$apid" 2>/dev/null || true; }
done
upload=$(printf '%s\n' "${uploads[@]}" | median)
echo "  $upload"

start_nginx "$work/files"
nport=$NGINX_PORT
wait_http "http://127.0.0.1:$nport/node.img"
echo "# download, median of $RUNS (MiB/s)"
speed() { curl -sf -o /dev/null -w '%{speed_download}\n' "$1"; }
declare -A down
for name in nginx agent; do
  case $name in nginx) url="http://127.0.0.1:$nport/node.img" ;; agent) url="http://127.0.0.1:$port/files/bench/site/os_images/node.img" ;; esac
  speed "$url" >/dev/null
  down[$name]=$(for _ in $(seq "$RUNS"); do speed "$url"; done | median | awk '{printf "%.0f", $1/1048576}')
  echo "  $name ${down[$name]}"
done

echo
echo "cores: $(nproc); runs: $RUNS; file: ${FILE_MIB} MiB; chunks: ${CHUNK_MIB} MiB"
printf '%-40s %8s   %s\n' "measure (MiB/s)" value "ratio (target)"
printf '%-40s %8s\n' "sha256sum" "$hash"
printf '%-40s %8s   %s\n' "REST upload (PATCH chunks, verified)" "$upload" "upload/sha256sum $(ratio "$upload" "$hash") (>=0.85)"
printf '%-40s %8s\n' "nginx download" "${down[nginx]}"
printf '%-40s %8s   %s\n' "agent /files download" "${down[agent]}" "agent/nginx $(ratio "${down[agent]}" "${down[nginx]}") (>=0.9)"
