#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-tools.sh
export FOOTHOLD_TOOLS="$(pwd)/target/tools/bin"
# Every test binary runs even after one fails: a CI run names all its failures, not only the first binary's.
cargo test --workspace --all-targets --no-fail-fast "$@"
