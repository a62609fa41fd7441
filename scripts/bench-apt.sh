#!/usr/bin/env bash
# apt benchmark (not a test): `apt-get update` and `apt-get install` of a ~50 MB package set (Debian packages
# with no dependencies, so that they install into an empty root) from the agent's signed repository, and the
# same from Debian's mirror, on this machine: the host's apt and dpkg in private roots (APT_CONFIG), nothing of
# the host's package state touched. The packages are downloaded from the mirror once (cached under
# ~/.cache/foothold/bench-apt) and uploaded to a release agent on 127.0.0.1 as binary_images records.
# Prints medians (seconds) and agent/mirror ratios.   RUNS=3 MIRROR=http://deb.debian.org/debian scripts/bench-apt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
PACKAGES=(golang-1.19-src fonts-noto-core fonts-noto-color-emoji fonts-freefont-ttf fonts-liberation2 fonts-noto-ui-core fonts-dejavu-core fonts-noto-mono)
. scripts/bench-common.sh
bench_setup curl
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f\n", b-a}'; }

# root DIR SOURCES : a private root for apt and dpkg at DIR whose only source is the deb822 text SOURCES.
root() {
  local r=$1
  rm -rf "$r"
  mkdir -p "$r"/etc/apt/{sources.list.d,apt.conf.d,preferences.d,trusted.gpg.d} "$r"/var/lib/apt/lists/partial \
    "$r"/var/cache/apt/archives/partial "$r"/var/lib/dpkg/{info,updates} "$r"/var/log/apt
  : > "$r/var/lib/dpkg/status"; : > "$r/etc/apt/sources.list"
  printf '%s' "$2" > "$r/etc/apt/sources.list.d/bench.sources"
  cat > "$r.conf" <<CONF
Dir "$r/"; Dir::State::status "$r/var/lib/dpkg/status"; Debug::NoLocking "true";
APT::Architecture "amd64"; Acquire::Languages "none"; Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";
DPkg::Options { "--root=$r"; "--force-not-root"; "--log=$r/var/log/dpkg.log"; };
CONF
}
apt_in() { local r=$1; shift; APT_CONFIG="$r.conf" DEBIAN_FRONTEND=noninteractive apt-get -qq -y "$@" >/dev/null; }

cache=${XDG_CACHE_HOME:-$HOME/.cache}/foothold/bench-apt/$SUITE
mkdir -p "$cache"
mirror_sources="Types: deb
URIs: $MIRROR
Suites: $SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"
if [ "$(ls "$cache"/*.deb 2>/dev/null | wc -l)" -lt ${#PACKAGES[@]} ]; then
  echo "# downloading ${PACKAGES[*]} from $MIRROR once"
  root "$work/fetch" "$mirror_sources"
  apt_in "$work/fetch" update
  apt_in "$work/fetch" install --download-only "${PACKAGES[@]}"
  cp "$work/fetch"/var/cache/apt/archives/*.deb "$cache/"
fi
total=$(du -cb "$cache"/*.deb | tail -1 | cut -f1)
echo "# package set: ${#PACKAGES[@]} packages, $((total >> 20)) MiB"

echo tok > "$work/token"
port=$(free_port)
"$AGENT" serve --listen "127.0.0.1:$port" --data "$work/data" --token-file "$work/token" --no-controllers \
  2>"$work/agent.log" & pids+=("$!")
wait_http "http://127.0.0.1:$port/healthz"
base="http://127.0.0.1:$port/v1/baremetalcluster/bench/apt/binary_images"
for deb in "$cache"/*.deb; do
  name=$(basename "$deb"); size=$(stat -c %s "$deb")
  curl -sf -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' \
    -d "{\"image_name\":\"$name\",\"image_length\":$size}" "$base" >/dev/null
  curl -sf -X PATCH -H 'Authorization: Bearer tok' -H 'Upload-Offset: 0' --data-binary "@$deb" "$base/$name" >/dev/null
done
for _ in $(seq 1 200); do
  n=$(curl -sf "http://127.0.0.1:$port/apt/dists/foothold/main/binary-amd64/Packages" | grep -c '^Package: ' || true)
  [ "$n" -ge ${#PACKAGES[@]} ] && break
  sleep 0.1
done
agent_sources=$(curl -sf "http://127.0.0.1:$port/apt/foothold.sources")

# run NAME SOURCES : RUNS times from an empty root: update, the packages' download (install --download-only),
# then their install from what was downloaded (dpkg's part, the same for both sources); prints the medians.
run() {
  local updates=() downloads=() installs=() t i
  for i in $(seq "$RUNS"); do
    root "$work/$1" "$2"
    t=$(now); apt_in "$work/$1" update; updates+=("$(since "$t")")
    t=$(now); apt_in "$work/$1" install --download-only "${PACKAGES[@]}"; downloads+=("$(since "$t")")
    t=$(now); apt_in "$work/$1" install --no-download "${PACKAGES[@]}"; installs+=("$(since "$t")")
    for p in "${PACKAGES[@]}"; do grep -q "^Package: $p\$" "$work/$1/var/lib/dpkg/status" || { echo "$p not installed" >&2; exit 1; }; done
  done
  echo "$(printf '%s\n' "${updates[@]}" | median) $(printf '%s\n' "${downloads[@]}" | median) $(printf '%s\n' "${installs[@]}" | median)"
}
echo "# from an empty root, median of $RUNS (s)"
read -r au ad ai < <(run agent "$agent_sources")
read -r mu md mi < <(run mirror "$mirror_sources")
row() { printf '  %-22s %9s %9s %9s\n' "$@"; }
row "" update download install
row "agent (127.0.0.1)" "$au" "$ad" "$ai"
row "Debian mirror" "$mu" "$md" "$mi"
row "agent / mirror" "$(ratio "$au" "$mu")" "$(ratio "$ad" "$md")" "$(ratio "$ai" "$mi")"
