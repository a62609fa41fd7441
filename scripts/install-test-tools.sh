#!/usr/bin/env bash
# Installs every tool the test suite needs on a fresh Debian machine (root): registry clients from Debian,
# oras, tuspy and schemathesis from PyPI, and Go-built test tools (crane, the OCI conformance suite, kube-apiserver
# and etcd for the reconciler tests) cached under target/tools.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools="$root/target/tools/bin"
mkdir -p "$tools"

need_apt=()
for pair in skopeo:skopeo podman:podman containerd:containerd ctr:containerd curl:curl openssl:openssl haproxy:haproxy ssh:openssh-client virsh:libvirt-clients xmllint:libxml2-utils docker-registry:docker-registry htpasswd:apache2-utils busybox:busybox-static ssh-keygen:openssh-client ip:iproute2 nsenter:util-linux; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_apt+=("${pair#*:}")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-test-tools: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# sshd for the installer's SSH tests, which start their own on 127.0.0.1. The package must not start one on
# the host's interfaces: where the machine has no policy-rc.d, one that forbids starting services is in place
# while it installs.
if [ ! -x /usr/sbin/sshd ]; then
  echo "install-test-tools: apt-get install openssh-server (not started)"
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
  if [ -n "$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# The image builder's tools (the end-to-end image test builds and boots packages/lab.yaml).
scripts/install-build-tools.sh

# Python tools, pinned: oras (OCI artifacts), tuspy (tus uploads), schemathesis (OpenAPI fuzzing; its `st`
# is linked into target/tools/bin so tests find it whatever the Python installation's PATH).
if ! python3 -c 'import oras.provider, tusclient, schemathesis' 2>/dev/null; then
  echo "install-test-tools: pip install oras tuspy schemathesis"
  python3 -m pip install -q --disable-pip-version-check 'oras==0.2.43' 'tuspy==1.1.0' 'schemathesis==4.32.5'
fi
ln -sf "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/st" "$tools/st"

# libvirt for the virtual site's compute VMs (its daemons are started by hand: PID 1 is not systemd here). qemu
# runs a VM's guest forwards (guestfwd=...-cmd:) as a command per connection, which libvirt's default seccomp
# sandbox (spawn=deny) kills the VM for: the sandbox is off on test machines.
need_apt=()
[ -x /usr/sbin/libvirtd ] || need_apt+=(libvirt-daemon-system)
/usr/bin/python3 -c 'import libvirt' 2>/dev/null || need_apt+=(python3-libvirt)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-test-tools: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
if ! grep -q '^seccomp_sandbox = 0' /etc/libvirt/qemu.conf; then
  echo "install-test-tools: seccomp_sandbox = 0 in /etc/libvirt/qemu.conf (guest forwards spawn a relay)"
  echo 'seccomp_sandbox = 0' >> /etc/libvirt/qemu.conf
fi
# libvirt checks that its QEMU user can open /dev/kvm and compares that with what its QEMU probe found: where
# /dev/kvm is root's alone (as in containers) but the probe, as root, enabled KVM, every check disagrees and
# libvirt probes QEMU again on each call (a minute per domain change, which sushy-tools' virtual media makes
# several of). Debian's usual owner and mode settle it; the tests' domains run under TCG (type='qemu') anyway.
if [ -c /dev/kvm ] && [ "$(stat -c %G:%a /dev/kvm)" != kvm:660 ]; then
  echo "install-test-tools: /dev/kvm root:kvm 0660 (libvirt re-probes QEMU on every call otherwise)"
  chgrp kvm /dev/kvm && chmod 660 /dev/kvm
fi

# sushy-tools, the Redfish BMC of the Metal3 tests (its fake driver, and libvirt's for VMs), pinned, in a venv
# of its own (Flask and friends stay out of the system's Python) on Debian's Python, whose python3-libvirt its
# libvirt driver uses; `sushy-emulator` is linked into target/tools/bin.
if ! "$root/target/tools/sushy/bin/python" -c 'import sushy_tools, libvirt' 2>/dev/null; then
  echo "install-test-tools: pip install sushy-tools (venv target/tools/sushy)"
  rm -rf "$root/target/tools/sushy"
  /usr/bin/python3 -m venv --system-site-packages "$root/target/tools/sushy"
  "$root/target/tools/sushy/bin/pip" install -q --disable-pip-version-check 'sushy-tools==2.2.0'
fi
ln -sf "$root/target/tools/sushy/bin/sushy-emulator" "$tools/sushy-emulator"

# Metal3's source archives, which packages/appliance.yaml names (the appliance test builds it).
scripts/third-party.sh

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi

# Go test tools, rebuilt only when the pinned module set changes.
stamp="$tools/.go-tools.sha256"
want=$(cat scripts/go-tools/go.mod scripts/go-tools/go.sum scripts/go-tools/gotmpl-oracle/main.go | sha256sum | cut -d' ' -f1)
if [ ! -x "$tools/crane" ] || [ ! -x "$tools/oci-conformance" ] || [ ! -x "$tools/gotmpl-oracle" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  command -v go >/dev/null 2>&1 || { echo "install-test-tools: Go is required to build crane, the conformance suite and the template oracle" >&2; exit 1; }
  echo "install-test-tools: building crane, the OCI conformance suite and gotmpl-oracle"
  (
    cd scripts/go-tools
    # The conformance module has no checksum-database entry; go.sum pins its hash.
    export GOFLAGS=-mod=readonly GONOSUMDB=github.com/opencontainers/distribution-spec/conformance
    go build -o "$tools/crane" github.com/google/go-containerregistry/cmd/crane
    go build -o "$tools/oci-conformance" github.com/opencontainers/distribution-spec/conformance
    # Go's text/template with sprig, as Airship's ViNO renders networkData: agent/tests/gotmpl_oracle.rs.
    go build -o "$tools/gotmpl-oracle" ./gotmpl-oracle
  )
  echo "$want" > "$stamp"
fi
# The reconcilers' test environment: kube-apiserver and etcd built from the modules pinned in scripts/kube-tools
# (~7 minutes on 2 cores), rebuilt only when the pin changes.
stamp="$tools/.kube-tools.sha256"
want=$(cat scripts/kube-tools/go.mod scripts/kube-tools/go.sum | sha256sum | cut -d' ' -f1)
if [ ! -x "$tools/kube-apiserver" ] || [ ! -x "$tools/etcd" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  command -v go >/dev/null 2>&1 || { echo "install-test-tools: Go is required to build kube-apiserver and etcd" >&2; exit 1; }
  echo "install-test-tools: building kube-apiserver and etcd (scripts/kube-tools)"
  (
    cd scripts/kube-tools
    export GOFLAGS=-mod=readonly
    go build -trimpath -ldflags=-s -o "$tools/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    go build -trimpath -ldflags=-s -o "$tools/etcd" go.etcd.io/etcd/server/v3
  )
  echo "$want" > "$stamp"
fi
echo "install-test-tools: ready ($tools)"
