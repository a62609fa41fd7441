# Sourced by a site's script that runs in mount and PID namespaces of its own inside the site's network namespace
# (tests/fixtures/native-site.sh, scripts/virtual-site.sh): a libvirtd of the site's own for its compute VMs, so
# their taps are on the namespace's bridge and the host's libvirtd (other tests', a lab's) never sees them.
#
#   site_libvirtd STATE POOL    # its log STATE/libvirtd.log; the storage pool `default` at POOL

site_libvirtd() {
  local state=$1 pool=$2 d i
  # This PID namespace's /proc: libvirtd looks its clients up there by the PID their socket gives (the site's
  # commands join the namespace: nsenter -p).
  mount -t proc proc /proc
  # libvirt's state, and its definitions (domains, pools), on tmpfs: the host's libvirtd would load them at its
  # next start, and has a pool `default` of its own.
  for d in /run/libvirt /var/lib/libvirt/qemu /var/cache/libvirt /var/log/libvirt /etc/libvirt/qemu /etc/libvirt/storage; do
    mkdir -p "$d"
    mount -t tmpfs -o mode=755 tmpfs "$d"
  done
  # Their pid files beside their sockets: the host's daemons, if any, hold /run/virtlogd.pid and /run/libvirtd.pid.
  virtlogd -d -p /run/libvirt/virtlogd.pid
  # libvirtd as Debian's libvirtd.service runs it (Restart=on-failure): started again when it dies, up to five
  # times. bookworm's libvirt 9.0 under qemu 10 was seen to segfault once in its qemu driver, and with it went
  # every BMC for the rest of the run; a new libvirtd takes back the domains that kept running.
  mkdir -p "$state"
  (
    for n in 1 2 3 4 5 6; do
      status=0
      libvirtd -p /run/libvirt/libvirtd.pid >> "$state/libvirtd.log" 2>&1 || status=$?
      echo "site-libvirt: libvirtd (start $n) exited with status $status" >&2
    done
  ) &
  # Its socket answers (bounded: 30 s).
  for i in $(seq 300); do
    virsh -c qemu:///system uri >/dev/null 2>&1 && break
    [ "$i" -lt 300 ] || { echo "site-libvirt: libvirtd did not answer within 30 s" >&2; return 1; }
    sleep 0.1
  done
  virsh -c qemu:///system pool-define-as default dir --target "$pool" >/dev/null
  virsh -c qemu:///system pool-start default >/dev/null
}
