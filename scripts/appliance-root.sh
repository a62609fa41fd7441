# Sourced, not run: the appliance's own root file system, taken out of its raw image and run on this host's CPU
# in namespaces of its own, for benchmarks of the software rather than of qemu's emulation (there is no KVM
# here). Its units' commands run as systemd would run them (EnvironmentFile, ExecStartPre, ExecStart), in a
# chroot, in a network namespace holding only loopback and the appliance's node address, and a PID namespace:
# when the shell that started them ends, they all end.

# root_extract IMAGE DIR : the image's partition named "root" copied into DIR with debugfs (no loop device, no
# mount), modes kept, and its data partition ("foothold-data": the agent's store, the images the build
# imported) into DIR/var/lib/foothold, where the appliance mounts it.
root_extract() {
  local image=$1 dir=$2
  part() {
    sfdisk -J "$image" | python3 -c 'import json,sys; print(next(p["start"] for p in json.load(sys.stdin)["partitiontable"]["partitions"] if p.get("name") == sys.argv[1]))' "$1"
  }
  rm -rf "$dir"
  mkdir -p "$dir"
  debugfs -R "rdump / $dir" "$image?offset=$(($(part root) * 512))" > /dev/null 2>&1
  [ -x "$dir/usr/local/bin/kube-apiserver" ] || { echo "appliance-root: $image has no root partition with Kubernetes" >&2; return 1; }
  mkdir -p "$dir/var/lib/foothold"
  debugfs -R "rdump / $dir/var/lib/foothold" "$image?offset=$(($(part foothold-data) * 512))" > /dev/null 2>&1
  [ -f "$dir/var/lib/foothold/oci-layout" ] || { echo "appliance-root: $image has no data partition with the agent's store" >&2; return 1; }
}

# root_enter DIR : run in a fresh mount, network and PID namespace (unshare --mount --net --pid --fork): the
# kernel's file systems under DIR, loopback up with the node address of /etc/foothold/kubernetes.env on it
# (this kernel has no dummy interfaces), as the booted appliance has that address.
root_enter() {
  local dir=$1 address
  mount --make-rprivate /
  # The root a mount point of its own, as a booted root is: the kubelet looks up the mount its directory is on.
  mount --bind "$dir" "$dir"
  mount -t proc proc "$dir/proc"
  mount -t sysfs sysfs "$dir/sys"
  mount --rbind /dev "$dir/dev"
  mount -t tmpfs -o mode=755 tmpfs "$dir/run"
  mount -t tmpfs -o mode=1777 tmpfs "$dir/tmp"
  ip link set lo up
  address=$(sed -n 's/^KUBE_NODE_ADDRESS=//p' "$dir/etc/foothold/kubernetes.env")
  ip addr add "$address/32" dev lo
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
}

# root_unit DIR UNIT : the unit's command lines (ExecStartPre, then ExecStart), each run to its end but the last,
# which is started in the background with its output in DIR/../UNIT.log; UNIT_PID is its PID. Its
# EnvironmentFile and Environment lines are its environment; LoadCredential files are put where systemd puts
# them; RuntimeDirectory and StateDirectory are made; a static User= and Group= are the main command's (setpriv,
# with no capabilities and no new privileges). Its drop-ins (/etc/systemd/system/UNIT.service.d/*.conf,
# in name order) come after it, as systemd reads them: an empty ExecStart= or ExecStartPre= clears the list.
root_unit() {
  local dir=$1 unit=$2 file log
  file="$dir/etc/systemd/system/$unit.service"
  [ -f "$file" ] || file="$dir/usr/lib/systemd/system/$unit.service"
  log="$(dirname "$dir")/$unit.log"
  python3 - "$dir" "$file" "$unit" > "$(dirname "$dir")/$unit.sh" <<'PY'
import os, shlex, sys
root, path, unit = sys.argv[1], sys.argv[2], sys.argv[3]
dropins = f"{root}/etc/systemd/system/{unit}.service.d"
paths = [path] + sorted(
    os.path.join(dropins, f) for f in (os.listdir(dropins) if os.path.isdir(dropins) else []) if f.endswith(".conf")
)
text = "\n".join(open(p).read() for p in paths)
text = text.replace("\\\n", " ").replace("%p", unit).replace("%n", unit + ".service")

def assignment(line):
    """KEY=VALUE as systemd reads it (the rest of the line, one pair of quotes removed): a shell export."""
    key, _, value = line.strip().partition("=")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return f"export {key}={shlex.quote(value)}"

env, files, pre, start, user, group, dynamic, states = [], [], [], None, None, None, False, []
for line in text.splitlines():
    key, _, value = line.partition("=")
    key, value = key.strip(), value.strip()
    if key == "Environment":
        env.extend(assignment(v) for v in shlex.split(value))
    elif key == "EnvironmentFile":
        optional, f = value.startswith("-"), value.lstrip("-")
        if not os.path.exists(root + f):
            if optional:
                continue
            sys.exit(f"{unit}: EnvironmentFile {f} missing")
        for l in open(root + f):
            if l.strip() and not l.lstrip().startswith(("#", ";")):
                files.append(assignment(l))
    elif key == "ExecStartPre":
        if value:
            # systemd's "-": the command's failure is ignored.
            command = value.lstrip("-+!@:")
            pre.append(command + " || true" if "-" in value[: len(value) - len(command)] else command)
        else:
            pre = []
    elif key == "ExecStart":
        start = value.lstrip("-+!@:") or None
    elif key == "LoadCredential":
        name, src = value.split(":", 1)
        env.append(f"mkdir -p /run/credentials/{unit}.service && cp {src} /run/credentials/{unit}.service/{name}")
    elif key == "RuntimeDirectory":
        env.append(f"mkdir -p /run/{value}; export RUNTIME_DIRECTORY=/run/{value}")
    elif key == "User":
        user = value
    elif key == "DynamicUser":
        dynamic = value in ("yes", "true", "1", "on")
    elif key == "Group":
        group = value
    elif key == "StateDirectory":
        env.append(f"mkdir -p /var/lib/{value}; export STATE_DIRECTORY=/var/lib/{value}")
        states.append(f"/var/lib/{value}")
print("set -e")
# systemd: EnvironmentFile= wins over Environment=.
print("\n".join(env + files))
for p in pre:
    print(p)
# systemd's ${VAR} (one word) and $VAR (split on spaces) are the shell's expansions here. User= and Group=
# (the main command's; the sandboxing directives have no stand-in here): its IDs and the user's groups. A
# DynamicUser= unit's user exists only while systemd runs it: it runs as root here.
if user and not dynamic:
    # systemd gives a static user its StateDirectory (recursively, when its owner is another).
    for d in states:
        print(f"chown -R {user}:{group or user} {d}")
    ids = f"--reuid={user} --regid={group or user} --init-groups"
    print(f"exec setpriv {ids} --inh-caps=-all --bounding-set=-all --no-new-privs -- " + start)
else:
    print("exec " + start)
PY
  chroot "$dir" /bin/sh -c "$(cat "$(dirname "$dir")/$unit.sh")" > "$log" 2>&1 &
  UNIT_PID=$!
}

# root_once DIR UNIT : a oneshot unit's command, run to its end in the chroot.
root_once() {
  local dir=$1 unit=$2
  root_unit "$dir" "$unit"
  wait "$UNIT_PID" || { echo "appliance-root: $unit failed:" >&2; tail -20 "$(dirname "$dir")/$unit.log" >&2; return 1; }
}

# root_metal3 DIR : the appliance's units Metal3 needs, in their boot order (no kubelet, containerd or CoreDNS,
# which Metal3 does not use): its firewall (loaded into the network namespace the site runs in), its first-boot
# scripts, the control plane, the add-ons (BMO's CRDs; systemd would restart BMO until they were made), the
# agent, Ironic and BMO. UNIT_PIDS holds the long-running ones.
root_metal3() {
  local dir=$1 u
  UNIT_PIDS=()
  for u in foothold-firewall foothold-firstboot foothold-pki foothold-kube-pki foothold-kube-pki-renew foothold-metal3-auth; do
    root_once "$dir" "$u"
  done
  for u in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    root_unit "$dir" "$u"
    UNIT_PIDS+=("$UNIT_PID")
  done
  root_once "$dir" foothold-kube-addons
  for u in foothold-agent ironic baremetal-operator; do
    root_unit "$dir" "$u"
    UNIT_PIDS+=("$UNIT_PID")
  done
}

# root_node DIR : the appliance's own Kubernetes node, for the pods it runs (the BPA's installer Jobs): containerd
# (its ExecStartPre writes the agent's mirror configuration), the kubelet and kube-proxy, after root_metal3. This
# host is not the appliance: no systemd runs here and its cgroups are v1, so the copy of the root taken out for
# the site is changed to match (cgroupfs for runc and the kubelet, whose refusal of v1 is turned off) and this
# host's cgroup hierarchies are mounted into it; the pods' cgroups are made in them (under /kubepods).
root_node() {
  local dir=$1 u v1=0
  # `ip netns exec` gave this mount namespace a sysfs of its own, without the host's cgroup mounts: each v1
  # hierarchy is mounted again (the same hierarchy, as its controller is bound to it).
  mount -t tmpfs -o mode=755 cgroup "$dir/sys/fs/cgroup"
  while read -r c hierarchy _ enabled; do
    [ "$enabled" = 1 ] && [ "$hierarchy" != 0 ] || continue
    mkdir -p "$dir/sys/fs/cgroup/$c"
    mount -t cgroup -o "$c" cgroup "$dir/sys/fs/cgroup/$c"
    v1=1
  done < <(grep -v '^#' /proc/cgroups)
  # A host with the unified hierarchy alone (no controller on a v1 one): that, as the appliance has it (not tried
  # on these machines, whose cgroups are v1).
  if [ "$v1" = 0 ]; then
    umount "$dir/sys/fs/cgroup"
    mount -t cgroup2 cgroup2 "$dir/sys/fs/cgroup"
  fi
  # And the named hierarchy systemd keeps, where this host has one: containerd finds every process's.
  if grep -q '^[0-9]*:name=systemd:' /proc/self/cgroup; then
    mkdir -p "$dir/sys/fs/cgroup/systemd"
    mount -t cgroup -o none,name=systemd cgroup "$dir/sys/fs/cgroup/systemd"
  fi
  # An earlier site's pods ended with it (its PID namespace), their cgroups stayed, empty: removed.
  find "$dir"/sys/fs/cgroup/kubepods "$dir"/sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
  sed -i 's/^  SystemdCgroup = true$/  SystemdCgroup = false/' "$dir/etc/containerd/config.toml"
  # Nor may a process here lower its OOM score (no CAP_SYS_RESOURCE, which these machines do not give): the
  # containers' scores are kept at containerd's own or above, as a rootless containerd does.
  grep -q '^  restrict_oom_score_adj = ' "$dir/etc/containerd/config.toml" ||
    sed -i 's/^\[plugins."io.containerd.grpc.v1.cri"\]$/&\n  restrict_oom_score_adj = true/' "$dir/etc/containerd/config.toml"
  sed -i 's/^cgroupDriver: systemd$/cgroupDriver: cgroupfs\nfailCgroupV1: false/' "$dir/etc/kubernetes/kubelet-config.yaml"
  # The site's namespace also holds the tests' BMC emulators, and virtualbmc's IPMI library wakes itself with a
  # datagram from the BMC's address to 127.0.0.1, which the kubelet's rule against such packets drops (the
  # appliance has no such process): here the kubelet leaves iptables alone (kube-proxy, whose localhost
  # NodePorts the appliance turns off, adds no such rule).
  grep -q '^makeIPTablesUtilChains:' "$dir/etc/kubernetes/kubelet-config.yaml" ||
    printf 'makeIPTablesUtilChains: false\n' >> "$dir/etc/kubernetes/kubelet-config.yaml"
  # A network namespace's nf_conntrack_max is read-only: kube-proxy leaves it as it is.
  grep -q '^conntrack:' "$dir/etc/kubernetes/kube-proxy-config.yaml" ||
    printf 'conntrack: {maxPerCore: 0}\n' >> "$dir/etc/kubernetes/kube-proxy-config.yaml"
  grep -q '^  SystemdCgroup = false$' "$dir/etc/containerd/config.toml" &&
    grep -q '^  restrict_oom_score_adj = true$' "$dir/etc/containerd/config.toml" &&
    grep -q '^cgroupDriver: cgroupfs$' "$dir/etc/kubernetes/kubelet-config.yaml" ||
    { echo "appliance-root: the node's cgroup settings are not where they were" >&2; return 1; }
  for u in containerd kubelet kube-proxy; do
    root_unit "$dir" "$u"
    UNIT_PIDS+=("$UNIT_PID")
  done
}
