#!/usr/bin/env bash
# Soak and fault test (127.0.0.1 only): 200 clients push blobs and manifests, pull back what they were
# acknowledged and upload REST images resumably, while the agent (release build) is SIGKILLed and restarted
# every 5–55 s; at the end fsck must be clean and every acknowledged blob, tag and image must be served intact.
#   scripts/soak.sh [--minutes 30] [--clients 200] [--seed 1]
# Prints the kill/restart cycles, operations and the agent's largest RSS (for the results log).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p foothold-agent -p foothold-e2e --bin foothold-agent --bin foothold-soak
exec target/release/foothold-soak --agent target/release/foothold-agent "$@"
