#!/usr/bin/env bash
# A virtual site on this machine for labs: the appliance VM, N compute nodes as libvirt domains, and
# sushy-tools as their Redfish BMC. Everything stays on this host: the appliance is isolated (its agent and API
# forwarded to 127.0.0.1, its BMC reached through a guest forward), the nodes reach only the appliance's agent.
#
#   scripts/virtual-site.sh out/foothold-appliance.qcow2 [nodes]
#
# Then, once the appliance is ready (kubectl on this host: the kubeconfig of its sudo user, server
# https://127.0.0.1:6443):
#   kubectl apply -f /var/lib/libvirt/images/foothold-site/hosts.yaml    # the nodes' Secrets and BareMetalHosts
# upload a node image (packages/node.yaml, built with this appliance's CA) as an os_images record, and set a
# host's image to its /files URL with format live-iso. Each node's console is <site>/<node>.console.log.
# Ctrl-C stops the appliance and removes the site (domains, their NVRAM and media, the directory).
#
# Needs root, and what scripts/install-test-tools.sh installs (libvirt, sushy-tools under target/tools).
# Environment: FOOTHOLD_SITE_DIR (default /var/lib/libvirt/images/foothold-site), FOOTHOLD_BMC_PORT (8001),
# FOOTHOLD_AGENT_PORT (5000), FOOTHOLD_API_PORT (6443), FOOTHOLD_SSH_PORT (2222).
set -euo pipefail
cd "$(dirname "$0")/.."

image=${1:?usage: scripts/virtual-site.sh <appliance image> [nodes]}
nodes=${2:-1}
site=${FOOTHOLD_SITE_DIR:-/var/lib/libvirt/images/foothold-site}
bmc_port=${FOOTHOLD_BMC_PORT:-8001}
agent_port=${FOOTHOLD_AGENT_PORT:-5000}
api_port=${FOOTHOLD_API_PORT:-6443}
ssh_port=${FOOTHOLD_SSH_PORT:-2222}
build=${FOOTHOLD_BUILD:-target/release/foothold-build}
sushy=${FOOTHOLD_SUSHY:-target/tools/bin/sushy-emulator}
for tool in "$build" "$sushy"; do
  [ -x "$tool" ] || { echo "virtual-site: $tool missing (cargo build --release; scripts/install-test-tools.sh)" >&2; exit 1; }
done
[ -f "$image" ] || { echo "virtual-site: $image: no such image" >&2; exit 1; }
[ -e "$site" ] && { echo "virtual-site: $site exists (a site left running? remove it, or set FOOTHOLD_SITE_DIR)" >&2; exit 1; }
virsh=(virsh -c qemu:///system)

# libvirt's daemons, started by hand where PID 1 is not systemd.
if ! timeout 30 "${virsh[@]}" version >/dev/null 2>&1; then
  virtlogd -d 2>/dev/null || true
  libvirtd -d
  for _ in $(seq 60); do timeout 5 "${virsh[@]}" version >/dev/null 2>&1 && break; sleep 1; done
  timeout 30 "${virsh[@]}" version >/dev/null
fi
if ! "${virsh[@]}" pool-info default >/dev/null 2>&1; then
  "${virsh[@]}" pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
fi
# (Read whole: grep -q would close the pipe early, which pipefail counts as a failure.)
case $("${virsh[@]}" pool-info default) in
  *running*) ;;
  *) "${virsh[@]}" pool-start default >/dev/null ;;
esac

"$build" site "$site" --nodes "$nodes" --agent-port "$agent_port" --bmc-port "$bmc_port" > "$site.nodes"
mv "$site.nodes" "$site/nodes"
sushy_pid=
cleanup() {
  [ -n "$sushy_pid" ] && kill "$sushy_pid" 2>/dev/null || true
  while read -r name uuid _mac; do
    "${virsh[@]}" destroy "$name" >/dev/null 2>&1 || true
    "${virsh[@]}" undefine --nvram "$name" >/dev/null 2>&1 || true
    for vol in $("${virsh[@]}" vol-list default | awk -v u="$uuid" 'index($1, u) {print $1}'); do
      "${virsh[@]}" vol-delete --pool default "$vol" >/dev/null 2>&1 || true
    done
  done < "$site/nodes"
  rm -rf "$site"
}
trap cleanup EXIT
while read -r name _uuid _mac; do
  "${virsh[@]}" define "$site/$name.xml" >/dev/null
done < "$site/nodes"
TMPDIR=$site/bmc-state "$sushy" --config "$site/sushy.conf" > "$site/bmc.log" 2>&1 &
sushy_pid=$!
echo "virtual-site: $nodes node(s) in $site (name uuid mac):"
cat "$site/nodes"
echo "virtual-site: BMC on 127.0.0.1:$bmc_port (user admin, password in $site/bmc-password), log $site/bmc.log"

# The BMC verifies the media URLs it fetches from the appliance's agent against the site CA (made at its first
# boot), the last certificate of the chain the agent serves. Taken from the agent once it answers.
(
  for _ in $(seq 900); do
    if openssl s_client -connect "127.0.0.1:$agent_port" -showcerts </dev/null 2>/dev/null |
      awk '/-----BEGIN CERTIFICATE-----/ {c = ""} {c = c $0 "\n"} /-----END CERTIFICATE-----/ {last = c}
        END {printf "%s", last}' > "$site/site-ca.pem.tmp" &&
      openssl x509 -noout -ext basicConstraints -in "$site/site-ca.pem.tmp" 2>/dev/null | grep -q "CA:TRUE"; then
      mv "$site/site-ca.pem.tmp" "$site/site-ca.pem"
      echo "virtual-site: the appliance's CA in $site/site-ca.pem"
      exit 0
    fi
    sleep 2
  done
) &

"$build" run "$image" --isolated --memory 4096 \
  --forward "$agent_port:5000" --forward "$api_port:6443" --forward "$ssh_port:22" \
  --guest-forward "8001:$bmc_port"
