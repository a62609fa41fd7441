#!/usr/bin/env bash
# kube-apiserver and etcd for the reconciler tests (agent/tests/kube): the appliance's own, built by the image
# builder from packages/appliance.yaml's pins into its cache (~/.cache/foothold, or $FOOTHOLD_CACHE), so the
# tests run the versions the appliance runs and one Go build serves both (the appliance test's fetch then
# finds them built). Copied once per machine into the tools cache, linked into target/tools/bin. Needs the builder: run after `cargo build`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
on_error kube-test-tools
build=${FOOTHOLD_BUILD:-${CARGO_TARGET_DIR:-target}/debug/foothold-build}
[ -x "$build" ] || die "$build is not built: run cargo build --workspace --all-targets first"
go_need
tools="$(pwd)/target/tools/bin"
mkdir -p "$tools"
while read -r field path; do
  name=${field#components.kubernetes.}
  case "$name" in
    kubeApiserver) name=kube-apiserver ;;
    etcd.binary) name=etcd ;;
    *) die "unexpected input $field" ;;
  esac
  # The builder's cache holds content, not programs: an executable copy per content, once per machine.
  dir="$(tools_cache)/$name-$(basename "$path" | cut -c1-12)"
  if [ ! -x "$dir/$name" ]; then
    mkdir -p "$dir"
    install -m 0755 "$path" "$dir/$name.partial"
    mv "$dir/$name.partial" "$dir/$name"
  fi
  ln -sfn "$dir/$name" "$tools/$name"
done < <("$build" fetch packages/appliance.yaml --only components.kubernetes.kubeApiserver \
  --only components.kubernetes.etcd.binary)
echo "kube-test-tools: $("$tools/kube-apiserver" --version), etcd $("$tools/etcd" --version | awk '/etcd Version/ {print $3}')"
