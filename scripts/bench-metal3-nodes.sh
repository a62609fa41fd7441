#!/usr/bin/env bash
# Per node, under TCG on this machine, both nodes at once: where a compute node's time goes from its
# BareMetalHost's creation to ready on its disk (issue 46's target: 8 minutes a node, both in parallel).
# The site is metal3_provisioning's (tests/metal3_provisioning.rs): the appliance's root run natively with
# its Ironic, BMO, DHCP and HTTP root, two libvirt VMs on its provisioning network, one behind an IPMI BMC
# (virtualbmc, PXE/iPXE boot), one behind a Redfish BMC (sushy-tools, virtual media). With
# FOOTHOLD_BENCH_NODES set, that test registers both hosts, lets them be inspected and cleaned, gives both the
# node image at once and ends once both are ready on their disks (tests/metal3_provisioning_bench.rs).
# Prints one line a node: the deploy ramdisk's boot with its hardware collection (Ironic's "inspect wait", which
# ends when the ramdisk's inventory arrives), inspection (Ironic processing it, to "Successfully finished
# inspection"), cleaning (to "available"), the wait for the image (available to deploying: it is set once both
# hosts are available, then BMO's turn), the deploy (image download and write, to "active"), the first boot from
# disk (to the node's ready marker on its console), creation to ready, and
# that against the target. No peer runs beside it: Metal3's own ironic-image is a container image this
# machine cannot pull, so the reference is the issue's target. The table is plotted too (scripts/plot-phases.py:
# a bar a node, its phases one after another, the target marked), for the results log.
# Needs root and what scripts/install-test-tools.sh installs. Usage: scripts/bench-metal3-nodes.sh
# (OUT=<file> keeps the table there as well; FOOTHOLD_ACCEL is tcg unless set.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp "${TMPDIR:-/tmp}/bench-metal3-nodes.XXXXXX")}
rm -f "$out"
export FOOTHOLD_ACCEL=${FOOTHOLD_ACCEL:-tcg} FOOTHOLD_BENCH_NODES=$out
started=$(date +%s)
scripts/test.sh -- --exact --nocapture \
  a_host_is_inspected_cleaned_and_installed_to_disk_over_the_appliances_provisioning_network
if [ ! -s "$out" ]; then
  echo "bench-metal3-nodes: the test ended without its table ($out): was the run cut short by a budget?" >&2
  exit 1
fi
echo
echo "== per node, seconds (both nodes at once; the whole run took $(($(date +%s) - started)) s)"
grep -v '^#' "$out" | column -t -s $'\t'
grep '^#' "$out" || true
python3 scripts/plot-phases.py "$out" "$out.svg" "Per node, both at once, under TCG ($(date -u +%F))"
echo "table: $out, plotted in $out.svg"
