#!/usr/bin/env bash
# SIP benchmark (not a test): the planner on 10,000 hosts, and a 100-host SIPCluster reconciled by the release
# agent on the real etcd + kube-apiserver of the tests. Prints medians against the targets.
#   RUNS=5 scripts/bench-sip.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-tools.sh >/dev/null
RUNS=${RUNS:-5} cargo test --release -q -p foothold-agent --test kube -- --ignored --nocapture bench_sip 2>&1 \
  | grep -v '^running\|^test \|^$\|^\.$\|test result'
