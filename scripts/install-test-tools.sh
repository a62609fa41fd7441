#!/usr/bin/env bash
# Installs every tool the test suite needs on a Debian machine that has only Rust (as root): registry clients,
# libvirt and the builder's tools from Debian; the Go toolchain the pins need (scripts/go-version); oras,
# tuspy and schemathesis in a venv, sushy-tools in another, virtualbmc in a third; crane, the OCI conformance
# suite, gotmpl-oracle and promql-check built with Go; Metal3's source archives linked from ../shared/third_party. kube-apiserver and etcd come
# from scripts/kube-test-tools.sh, which needs the builder (scripts/test.sh runs both).
#
# What is built or installed lands once per machine under ~/.cache/foothold/tools/<tool>-<version>-<go or
# python version> ($FOOTHOLD_TOOLS_CACHE) and is linked into target/tools/ of each clone. Idempotent: a second
# run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
on_error install-test-tools
root=$(pwd)
tools="$root/target/tools/bin"
cache=$(tools_cache)
mkdir -p "$tools" "$cache"

apt_need skopeo:skopeo podman:podman containerd:containerd ctr:containerd curl:curl openssl:openssl \
  haproxy:haproxy ssh:openssh-client ssh-keygen:openssh-client virsh:libvirt-clients xmllint:libxml2-utils \
  docker-registry:docker-registry htpasswd:apache2-utils busybox:busybox-static ip:iproute2 nsenter:util-linux \
  e2fsck:e2fsprogs debugfs:e2fsprogs cc:gcc unzip:unzip man:man-db

# sshd for the installer's SSH tests, which start their own on 127.0.0.1. The package must not start one on
# the host's interfaces: where the machine has no policy-rc.d, one that forbids starting services is in place
# while it installs.
if [ ! -x /usr/sbin/sshd ]; then
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=1
  fi
  apt_need /usr/sbin/sshd:openssh-server
  if [ -n "$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# The image builder's tools (the end-to-end tests build and boot images).
scripts/install-build-tools.sh

# libvirt for the virtual site's compute VMs (its daemons are started by hand: PID 1 is not systemd here),
# Debian's Python with its libvirt binding and venv.
apt_need /usr/sbin/libvirtd:libvirt-daemon-system
/usr/bin/python3 -c 'import libvirt' 2>/dev/null || apt_install python3-libvirt
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
# qemu runs a VM's guest forwards (guestfwd=...-cmd:) as a command per connection, which libvirt's default
# seccomp sandbox (spawn=deny) kills the VM for: the sandbox is off on test machines.
if ! grep -q '^seccomp_sandbox = 0' /etc/libvirt/qemu.conf; then
  echo "install-test-tools: seccomp_sandbox = 0 in /etc/libvirt/qemu.conf (guest forwards spawn a relay)"
  echo 'seccomp_sandbox = 0' >>/etc/libvirt/qemu.conf
fi
# libvirt checks that its QEMU user can open /dev/kvm and compares that with what its QEMU probe found: where
# /dev/kvm is root's alone (as in containers) but the probe, as root, enabled KVM, every check disagrees and
# libvirt probes QEMU again on each call (a minute per domain change, which sushy-tools' virtual media makes
# several of). Debian's usual owner and mode settle it; the tests' domains run under TCG (type='qemu') anyway.
if [ -c /dev/kvm ] && [ "$(stat -c %G:%a /dev/kvm)" != kvm:660 ]; then
  echo "install-test-tools: /dev/kvm root:kvm 0660 (libvirt re-probes QEMU on every call otherwise)"
  chgrp kvm /dev/kvm && chmod 660 /dev/kvm
fi

py=$(/usr/bin/python3 -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')
# venv <dir> <pip args...>: a venv made once; a marker says it is complete (its scripts name its directory,
# so it is made in place, and an install cut off is made again).
venv() {
  local dir=$1
  shift
  [ -e "$dir/.installed" ] && return 0
  echo "install-test-tools: pip install $* (venv $dir)"
  rm -rf "$dir"
  /usr/bin/python3 -m venv "${venv_args[@]}" "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@" || {
    rm -rf "$dir"
    die "pip install $* failed"
  }
  touch "$dir/.installed"
}

# Python clients, pinned, in a venv (Debian's Python refuses `pip install` into itself, PEP 668): oras (OCI
# artifacts), tuspy (tus uploads), schemathesis (OpenAPI fuzzing). Tests run `python3` and `st` from
# target/tools/bin: a wrapper that runs the venv's interpreter, and a link.
pins='oras==0.2.43 tuspy==1.1.0 schemathesis==4.32.5'
venv_args=()
pyclients="$cache/python-clients-$(echo "$pins" | sha256sum | cut -c1-12)-$py"
# shellcheck disable=SC2086
venv "$pyclients" $pins
printf '#!/bin/sh\nexec %s/bin/python3 "$@"\n' "$pyclients" >"$tools/python3.new"
chmod 755 "$tools/python3.new"
mv "$tools/python3.new" "$tools/python3"
ln -sfn "$pyclients/bin/st" "$tools/st"

# sushy-tools, the Redfish BMC of the Metal3 tests (its fake driver, and libvirt's for VMs), pinned, in a venv
# on Debian's Python whose python3-libvirt its libvirt driver uses. target/tools/sushy is the venv.
venv_args=(--system-site-packages)
sushy="$cache/sushy-tools-2.2.0-$py"
venv "$sushy" 'sushy-tools==2.2.0'
"$sushy/bin/python" -c 'import sushy_tools, libvirt' || die "$sushy cannot import sushy_tools and libvirt"
ln -sfn "$sushy" "$root/target/tools/sushy"
ln -sfn "$sushy/bin/sushy-emulator" "$tools/sushy-emulator"
# virtualbmc, the IPMI BMC of the provisioning test's libvirt domains (vbmcd serves one IPMI endpoint a
# domain), pinned, in a venv on Debian's Python and its python3-libvirt as sushy-tools'.
vbmc="$cache/virtualbmc-3.3.0-$py"
venv "$vbmc" 'virtualbmc==3.3.0'
"$vbmc/bin/python" -c 'import virtualbmc, libvirt, pyghmi' || die "$vbmc cannot import virtualbmc, libvirt and pyghmi"
ln -sfn "$vbmc/bin/vbmc" "$tools/vbmc"
ln -sfn "$vbmc/bin/vbmcd" "$tools/vbmcd"
# ipmitool, to check the IPMI BMC as Ironic's ipmi driver talks to it.
apt_need ipmitool:ipmitool

# The provisioning network's test: Debian's dnsmasq (dnsmasq-base: the binary, no service of its own), and
# iPXE's builds that the appliance serves over TFTP, unpacked from Debian's ipxe package rather than installed
# (the package adds a GRUB menu entry to the host). target/tools/ipxe holds them.
apt_need /usr/sbin/dnsmasq:dnsmasq-base
# busybox's udhcpc: DHCP clients with the client ids the test chooses.
apt_need busybox:busybox
ipxe_candidate() { apt-cache policy ipxe | awk '/Candidate:/ && $2 != "(none)" {print $2}' | tr ':' '_'; }
ipxe_version=$(ipxe_candidate)
if [ -z "$ipxe_version" ]; then
  apt-get update -qq || die "apt-get update failed: Debian's mirror is needed for the ipxe package"
  ipxe_version=$(ipxe_candidate)
fi
[ -n "$ipxe_version" ] || die "Debian's ipxe package is not in apt's lists"
ipxe="$cache/ipxe-$ipxe_version"
if [ ! -s "$ipxe/snponly.efi" ]; then
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt's download user writes there
  (cd "$tmp" && apt-get download -qq ipxe) || die "apt-get download ipxe failed"
  dpkg-deb -x "$tmp"/ipxe_*.deb "$tmp/x"
  mkdir -p "$tmp/out"
  cp "$tmp/x/usr/lib/ipxe/undionly.kpxe" "$tmp/x/usr/lib/ipxe/snponly.efi" "$tmp/out/"
  rm -rf "$ipxe"
  mv "$tmp/out" "$ipxe"
  rm -rf "$tmp"
fi
ln -sfn "$ipxe" "$root/target/tools/ipxe"

# Metal3's source archives, which packages/appliance.yaml names (the appliance test builds it).
scripts/third-party.sh || die "Metal3's source archives are missing (see above): set FOOTHOLD_THIRD_PARTY"

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi

# Go test tools, each built once per version and toolchain.
go_need
gov=$(go env GOVERSION)
# go_tool <name> <version> <package or ./dir> [module]: builds it from the pinned module set of scripts/go-tools
# (or of the module directory given).
go_tool() {
  local name=$1 version=$2 pkg=$3 module=${4:-scripts/go-tools} dir
  dir="$cache/$name-$version-$gov"
  if [ ! -x "$dir/$name" ]; then
    echo "install-test-tools: building $name $version with $gov"
    mkdir -p "$dir"
    # The conformance module has no checksum-database entry; go.sum pins its hash.
    (cd "$module" && GOFLAGS=-mod=readonly GONOSUMDB=github.com/opencontainers/distribution-spec/conformance \
      go build -trimpath -o "$dir/$name.partial" "$pkg")
    mv "$dir/$name.partial" "$dir/$name"
  fi
  ln -sfn "$dir/$name" "$tools/$name"
}
required() { awk -v m="$1" '$1 == m {print $2; exit}' scripts/go-tools/go.mod; }
go_tool crane "$(required github.com/google/go-containerregistry)" github.com/google/go-containerregistry/cmd/crane
go_tool oci-conformance "$(required github.com/opencontainers/distribution-spec/conformance)" \
  github.com/opencontainers/distribution-spec/conformance
# Go's text/template with sprig, as Airship's ViNO renders networkData: agent/tests/gotmpl_oracle.rs.
go_tool gotmpl-oracle "$(cat scripts/go-tools/go.sum scripts/go-tools/gotmpl-oracle/main.go | sha256sum | cut -c1-12)" \
  ./gotmpl-oracle
# Prometheus's rule-file and PromQL parsers, which read monitoring/'s alerts and dashboard for
# agent/tests/http/monitoring.rs; a module of its own, so Prometheus's requirements stay out of the tools' above.
go_tool promql-check "$(cat scripts/promql-check/go.sum scripts/promql-check/main.go | sha256sum | cut -c1-12)" \
  . scripts/promql-check
echo "install-test-tools: ready ($tools; built and installed once under $cache)"
