#!/usr/bin/env bash
# Sets up and builds the lab appliance on a fresh Debian machine (root): installs the builder's Debian tools,
# builds foothold-agent and foothold-build (release), writes the lab's local inputs, and builds
# packages/lab.yaml into out/ (foothold-lab.raw, .qcow2, .iso, each with .manifest.json).
# Boot the result with: target/release/foothold-build run out/foothold-lab.raw
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-build-tools.sh
cargo build --release -p foothold-agent -p foothold-image-builder
scripts/lab-image-layout.sh >/dev/null
target/release/foothold-build build packages/lab.yaml --out "${OUT:-out}" "$@"
