#!/usr/bin/env bash
# A virtual site on this machine, shaped as a real one: the appliance VM and N compute nodes (libvirt domains
# with disks) on one provisioning network — a bridge inside a network namespace this script makes — with their
# BMCs on it too, at 172.22.0.2: sushy-tools' Redfish for even nodes (the deploy ramdisk by virtual media),
# virtualbmc's IPMI for odd ones (by PXE and iPXE). The nodes get their addresses from the appliance's DHCP.
# Nothing of it leaves the namespace: the appliance (isolated) has its agent, API and SSH forwarded to
# 127.0.0.1; the site's libvirtd, BMCs and nodes are reached with `<site>/enter <command>`.
#
#   scripts/virtual-site.sh out/foothold-appliance.qcow2 [nodes]
#
# The appliance must serve the provisioning network with a deploy ramdisk, as packages/appliance.yaml does. Once
# it is ready (kubectl with the kubeconfig of its sudo user, server https://127.0.0.1:6443):
#   kubectl apply -f /var/lib/libvirt/images/foothold-site/hosts.yaml   # the BMC Secret and BareMetalHosts
# and each host is inspected, cleaned and becomes available; upload a node disk image (packages/node.yaml) to
# the agent and set a host's image (its URL, checksum and format) to install it. Each node's console is
# <site>/<node>.console.log, the BMCs' and libvirtd's logs are in <site>/state/. Ctrl-C stops everything and
# removes the site (the namespace, the domains, their disks, the directory).
#
# Needs root, and what scripts/install-test-tools.sh installs (libvirt, sushy-tools and virtualbmc under
# target/tools). Environment: FOOTHOLD_SITE_DIR (default /var/lib/libvirt/images/foothold-site), FOOTHOLD_AGENT_PORT
# (5000), FOOTHOLD_API_PORT (6443), FOOTHOLD_SSH_PORT (2222), FOOTHOLD_NODE_DISK_GIB (10), FOOTHOLD_NODE_MEMORY
# (3072 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
on_error virtual-site

image=${1:?usage: scripts/virtual-site.sh <appliance image> [nodes]}
nodes=${2:-2}
site=${FOOTHOLD_SITE_DIR:-/var/lib/libvirt/images/foothold-site}
agent_port=${FOOTHOLD_AGENT_PORT:-5000}
api_port=${FOOTHOLD_API_PORT:-6443}
ssh_port=${FOOTHOLD_SSH_PORT:-2222}
disk_gib=${FOOTHOLD_NODE_DISK_GIB:-10}
memory=${FOOTHOLD_NODE_MEMORY:-3072}
build=$(realpath "${FOOTHOLD_BUILD:-target/release/foothold-build}")
tools=$(realpath "${FOOTHOLD_TOOLS:-target/tools/bin}")
for tool in "$build" "$tools/sushy-emulator" "$tools/vbmcd" "$tools/vbmc"; do
  [ -x "$tool" ] || die "$tool missing (cargo build --release; scripts/install-test-tools.sh)"
done
[ -f "$image" ] || die "$image: no such image"
[ -e "$site" ] && die "$site exists (a site left running? remove it, or set FOOTHOLD_SITE_DIR)"
ns=foothold-site-$$
appliance_tap=fhsite$$

"$build" site "$site" --nodes "$nodes" --memory "$memory" > "$site.nodes"
mv "$site.nodes" "$site/nodes"
mkdir -p "$site/state" "$site/pool"

site_pid=
cleanup() {
  # Everything is tried, whatever fails.
  trap - ERR
  set +e
  # unshare ignores SIGTERM while its child runs; killed, it takes its child (--kill-child), the namespace's PID 1,
  # and with it everything in the namespace.
  [ -n "$site_pid" ] && kill -KILL "$site_pid" 2>/dev/null
  [ -n "$site_pid" ] && wait "$site_pid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  ip tuntap del dev "$appliance_tap" mode tap 2>/dev/null
  rm -rf "$site"
  return 0
}
trap cleanup EXIT

# The provisioning network: a bridge in the namespace, the BMCs' address on it, a tap per node.
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" link set br0 up
ip -n "$ns" addr add 172.22.0.2/24 dev br0
while read -r domain _uuid _mac tap _bmc; do
  ip -n "$ns" tuntap add dev "$tap" mode tap
  ip -n "$ns" link set "$tap" master br0 up
  qemu-img create -q -f qcow2 "$site/$domain.qcow2" "${disk_gib}G"
done < "$site/nodes"

# The site's own libvirtd and BMCs, in mount and PID namespaces of their own inside it (they end with it).
ip netns exec "$ns" unshare --mount --pid --fork --kill-child \
  bash scripts/lib/virtual-site-inside.sh "$site" "$tools" > "$site/state/site.log" 2>&1 &
site_pid=$!
for i in $(seq 120); do
  grep -q SITE-UP "$site/state/site.log" 2>/dev/null && break
  kill -0 "$site_pid" 2>/dev/null || die "the site stopped before it was up: $(tail -5 "$site/state/site.log")"
  [ "$i" -lt 120 ] || die "the site was not up within 120 s: $(tail -5 "$site/state/site.log")"
  sleep 1
done
# unshare's child: the inside script, PID 1 of the site's PID namespace.
inside=$(pgrep -P "$site_pid" | head -1)
cat > "$site/enter" <<ENTER
#!/bin/sh
# A command in the site's namespaces (its libvirtd: virsh -c qemu:///system list; its network: ping 172.22.0.1).
exec nsenter -t $inside -m -n -p -- "\$@"
ENTER
chmod 755 "$site/enter"

echo "virtual-site: $nodes node(s) in $site (domain uuid mac tap bmc):"
cat "$site/nodes"
echo "virtual-site: BMCs at 172.22.0.2 (user admin, password in $site/bmc-password); $site/enter <command> runs in the site"

# The appliance's provisioning NIC: a tap made here, which qemu opens and the namespace then takes onto its bridge
# (a qemu started again, after a guest panic, opens a new one: taken too).
ip tuntap add dev "$appliance_tap" mode tap
(
  while [ -e "/run/netns/$ns" ]; do
    if [ -e "/sys/class/net/$appliance_tap" ] &&
      grep -qsx "iff:[[:space:]]*$appliance_tap" /proc/[0-9]*/fdinfo/* 2>/dev/null; then
      ip -n "$ns" link del "$appliance_tap" 2>/dev/null || true
      ip link set "$appliance_tap" netns "$ns" &&
        ip -n "$ns" link set "$appliance_tap" master br0 up &&
        echo "virtual-site: the appliance's ens4 is on the provisioning network"
    fi
    sleep 1
  done
) &

"$build" run "$image" --isolated --memory 4096 --provisioning-tap "$appliance_tap" \
  --forward "$agent_port:5000" --forward "$api_port:6443" --forward "$ssh_port:22"
