#!/usr/bin/env bash
# The test command: installs what the tests need, builds the workspace once (the end-to-end tests run the
# binaries of this very build: see tests/lib.rs, build_binaries), links the appliance's kube-apiserver and etcd
# for the reconciler tests, then runs every test of the workspace. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
APPLIANCE_TEST=the_appliance_runs_kubernetes_built_from_source_and_the_agent_reconciles_on_it
. scripts/lib/common.sh
on_error test
# .ci/run installs the tools as a phase of its own.
[ "${FOOTHOLD_TOOLS_READY:-}" = 1 ] || scripts/install-test-tools.sh
go_need
export FOOTHOLD_TOOLS="$(pwd)/target/tools/bin"
phase build cargo build --workspace --all-targets
phase kube-tools scripts/kube-test-tools.sh
# Every test binary runs even after one fails: a CI run names all its failures, not only the first binary's.
if [ $# -gt 0 ]; then
  phase test cargo test --workspace --all-targets --no-fail-fast "$@"
  exit
fi
# The appliance test runs last, by itself: in CI it starts only if its last time here fits in what is left of
# the budget (tests/deadline.rs), and last it can push no other test out of it. Same build, same features: the
# second cargo command compiles nothing.
rc=0
phase test cargo test --workspace --all-targets --no-fail-fast -- --skip "$APPLIANCE_TEST" || rc=$?
FOOTHOLD_CI_DEADLINE=${FOOTHOLD_CI_LAST_DEADLINE:-${FOOTHOLD_CI_DEADLINE:-}} \
  phase appliance cargo test --workspace --all-targets --no-fail-fast -- --exact "$APPLIANCE_TEST" || rc=$?
exit $rc
