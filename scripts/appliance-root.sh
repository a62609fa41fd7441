# Sourced, not run: the appliance's own root file system, taken out of its raw image and run on this host's CPU
# in namespaces of its own, for benchmarks of the software rather than of qemu's emulation (there is no KVM
# here). Its units' commands run as systemd would run them (EnvironmentFile, ExecStartPre, ExecStart), in a
# chroot, in a network namespace holding only loopback and the appliance's node address, and a PID namespace:
# when the shell that started them ends, they all end.

# root_extract IMAGE DIR : the image's partition named "root" copied into DIR with debugfs (no loop device, no
# mount), owners and modes kept.
root_extract() {
  local image=$1 dir=$2 start
  start=$(sfdisk -J "$image" | python3 -c 'import json,sys; print(next(p["start"] for p in json.load(sys.stdin)["partitiontable"]["partitions"] if p.get("name") == "root"))')
  rm -rf "$dir"
  mkdir -p "$dir"
  debugfs -R "rdump / $dir" "$image?offset=$((start * 512))" > /dev/null 2>&1
  [ -x "$dir/usr/local/bin/kube-apiserver" ] || { echo "appliance-root: $image has no root partition with Kubernetes" >&2; return 1; }
}

# root_enter DIR : run in a fresh mount, network and PID namespace (unshare --mount --net --pid --fork): the
# kernel's file systems under DIR, loopback up with the node address of /etc/foothold/kubernetes.env on it
# (this kernel has no dummy interfaces), as the booted appliance has that address.
root_enter() {
  local dir=$1 address
  mount --make-rprivate /
  mount -t proc proc "$dir/proc"
  mount -t sysfs sysfs "$dir/sys"
  mount --rbind /dev "$dir/dev"
  mount -t tmpfs -o mode=755 tmpfs "$dir/run"
  mount -t tmpfs -o mode=1777 tmpfs "$dir/tmp"
  mkdir -p "$dir/var/lib/foothold"
  # The data partition is not extracted: its list of the images the build imported is empty here.
  [ -e "$dir/var/lib/foothold/protected-repositories" ] ||
    echo '# the data partition is not extracted here' > "$dir/var/lib/foothold/protected-repositories"
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
            pre.append(value.lstrip("-+!@:"))
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
