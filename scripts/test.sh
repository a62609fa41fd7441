#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-tools.sh
export FOOTHOLD_TOOLS="$(pwd)/target/tools/bin"
cargo test --workspace --all-targets "$@"
