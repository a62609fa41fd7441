#!/usr/bin/env bash
# Writes the lab spec's local inputs (packages/lab.yaml), from fixed bytes and timestamps so their digests are
# the same on every machine: a small OCI image layout, lab/hello:1 (one gzip layer with a text file and a
# script), and beside it files/node-tool, a file the agent serves to compute nodes.
# Usage: scripts/lab-image-layout.sh [DIR]   (default target/foothold-lab/layout); prints the manifest digest.
set -euo pipefail
out=${1:-target/foothold-lab/layout}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/etc" "$work/root/usr/local/bin"
printf 'Foothold lab image\n' > "$work/root/etc/foothold-lab-release"
printf '#!/bin/sh\necho hello from the Foothold lab image\n' > "$work/root/usr/local/bin/hello"
chmod 755 "$work/root/usr/local/bin/hello"
tar --sort=name --mtime=@1767225600 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -C "$work/root" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 < "$work/layer.tar" > "$work/layer.tar.gz"
rm -rf "$out"
mkdir -p "$out/blobs/sha256"
put() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); cp "$1" "$out/blobs/sha256/$d"; echo "$d"; }
layer=$(put "$work/layer.tar.gz")
layer_size=$(stat -c %s "$work/layer.tar.gz")
printf '{"architecture":"amd64","os":"linux","config":{"Cmd":["/usr/local/bin/hello"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"created":"2026-01-01T00:00:00Z"}' \
  "$diff_id" > "$work/config.json"
config=$(put "$work/config.json")
config_size=$(stat -c %s "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" > "$work/manifest.json"
manifest=$(put "$work/manifest.json")
manifest_size=$(stat -c %s "$work/manifest.json")
printf '{"imageLayoutVersion":"1.0.0"}' > "$out/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"lab/hello:1"}}]}' \
  "$manifest" "$manifest_size" > "$out/index.json"
mkdir -p "$(dirname "$out")/files"
head -c 1048576 < <(yes 'foothold lab node tool') > "$(dirname "$out")/files/node-tool"
echo "sha256:$manifest"
