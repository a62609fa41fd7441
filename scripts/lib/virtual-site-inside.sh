#!/usr/bin/env bash
# The part of scripts/virtual-site.sh that runs inside the site's network namespace, in mount and PID namespaces
# of its own (whatever it starts ends with it): the site's libvirtd with the nodes' domains defined, virtualbmc's
# daemon with an IPMI BMC per odd node, sushy-tools as the even nodes' Redfish BMC, all at 172.22.0.2. Prints
# SITE-UP when all are started, then waits.
#
#   ip netns exec NS unshare --mount --pid --fork --kill-child scripts/lib/virtual-site-inside.sh SITE TOOLS
set -euo pipefail
site=$1 tools=$2
cd "$(dirname "$0")/../.."
. scripts/lib/site-libvirt.sh
trap 'echo "virtual-site-inside: line $LINENO: a command failed (exit status $?)" >&2' ERR

site_libvirtd "$site/state" "$site/pool"
while read -r domain _uuid _mac _tap _bmc; do
  virsh -c qemu:///system define "$site/$domain.xml" >/dev/null
done < "$site/nodes"

vbmc() { HOME=$site/state "$tools/vbmc" "$@"; }
HOME=$site/state "$tools/vbmcd" --foreground > "$site/state/vbmcd.log" 2>&1 &
for i in $(seq 150); do
  vbmc list >/dev/null 2>&1 && break
  [ "$i" -lt 150 ] || { echo "virtual-site-inside: vbmcd did not answer within 30 s" >&2; exit 1; }
  sleep 0.2
done
password=$(cat "$site/bmc-password")
while read -r domain _uuid _mac _tap bmc; do
  case $bmc in
    ipmi:*)
      vbmc add "$domain" --address 172.22.0.2 --port "${bmc#ipmi:}" --username admin --password "$password" \
        --libvirt-uri qemu:///system
      vbmc start "$domain"
      ;;
  esac
done < "$site/nodes"
TMPDIR=$site/state "$tools/sushy-emulator" --config "$site/sushy.conf" > "$site/state/sushy.log" 2>&1 &

echo SITE-UP
wait
