//! The shell scripts `install-cluster` runs on a host (by `sh -s` as root, the script on stdin), one per step,
//! each idempotent: a file is written only when its content differs (temp file, sync, rename), a service is
//! restarted only when its files changed, kubeadm runs only when its marker is missing. Every script ends by
//! printing [`DONE`] and what it did. Pure: values in, text out; every value was checked by the caller (the
//! release by `Release::parse`, names and addresses by `cluster`).

use std::fmt::Write as _;

use crate::installer::release::{Images, Release, BINARIES};

/// The line a step prints on success: `FOOTHOLD-STEP <what was done>`.
pub const DONE: &str = "FOOTHOLD-STEP";
/// Where the installer keeps its files and markers on a host (outside `/etc/kubernetes`, which
/// `kubeadm reset` empties and `kubeadm init` wants empty).
pub const DIR: &str = "/etc/foothold/kubernetes";
pub const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";
pub const CA_CERT: &str = "/etc/kubernetes/pki/ca.crt";
/// Where a host keeps its read credential for the appliance's agent (where reads need one): Foothold's node
/// images put it into containerd's mirror configuration at containerd's start (`containerd-mirror`).
pub const READ_TOKEN: &str = "/etc/foothold/read-token";
/// apt's login for the agent: the same file, with the same text, that a Foothold node's `apt-source` writes.
const APT_AUTH: &str = "/etc/apt/auth.conf.d/foothold.conf";
const END: &str = "FOOTHOLD_END_OF_FILE";

/// The start of every script: strict, with `changed` collecting what was written.
fn head() -> String {
    "set -eu\nexport DEBIAN_FRONTEND=noninteractive\nchanged=\"\"\n".into()
}

/// Writes `content` to `path` with `mode` unless it is there already; adds `path` to `$changed` when it
/// wrote.
fn put(s: &mut String, path: &str, content: &str, mode: u32) {
    assert!(
        !content.contains(END),
        "{path}: the content holds the heredoc's end"
    );
    let nl = if content.ends_with('\n') { "" } else { "\n" };
    let _ = write!(
        s,
        "t='{path}'\nmkdir -p \"$(dirname \"$t\")\"\ncat > \"$t.foothold\" <<'{END}'\n{content}{nl}{END}\n\
         chmod {mode:o} \"$t.foothold\"\n\
         if cmp -s \"$t.foothold\" \"$t\"; then rm -f \"$t.foothold\"; else sync \"$t.foothold\"; mv \"$t.foothold\" \"$t\"; changed=\"$changed $t\"; fi\n"
    );
}

/// The end of a script: `FOOTHOLD-STEP <done>`, saying which files changed.
fn done(s: &mut String, what: &str) {
    let _ = writeln!(
        s,
        "if [ -n \"$changed\" ]; then echo \"{DONE} {what} (wrote$changed)\"; else echo \"{DONE} {what} (unchanged)\"; fi"
    );
}

/// `units` enabled unless they are, and systemd reloaded only when this script wrote a file under
/// `/etc/systemd/system` or enabled a unit: a reload runs every generator and reads every unit again (about 8 s on
/// an emulated control-plane host, where the control plane waits for PID 1 meanwhile), and a run of the installer
/// over a host it already set up changes nothing.
fn enable(s: &mut String, units: &[&str]) {
    s.push_str("reload=\"\"\ncase \"$changed\" in */etc/systemd/system/*) reload=1 ;; esac\n");
    for unit in units {
        let _ = writeln!(
            s,
            "systemctl is-enabled -q {unit} || {{ systemctl enable -q --no-reload {unit}; reload=1; }}"
        );
    }
    s.push_str("[ -z \"$reload\" ] || systemctl daemon-reload\n");
}

const KUBELET_UNIT: &str = "[Unit]\nDescription=kubelet: the Kubernetes node agent (installed by foothold-agent install-cluster)\n\
Wants=network-online.target containerd.service\nAfter=network-online.target containerd.service\n\n\
[Service]\nExecStart=/usr/local/bin/kubelet\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n";

/// kubeadm's own drop-in: the flags `kubeadm init`/`join` write to `kubeadm-flags.env`.
const KUBELET_KUBEADM: &str = "[Service]\n\
Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n\
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
ExecStart=\n\
ExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS\n";

/// containerd as kubelet needs it: systemd cgroups (kubelet's driver), the release's sandbox image, Debian's
/// CNI plugins, and every registry mirrored by the appliance's agent as the node image set it up (certs.d).
fn containerd_config(sandbox: &str) -> String {
    format!(
        "# containerd for kubelet (foothold-agent install-cluster): systemd cgroups, the release's pause image,\n\
         # Debian's CNI plugins, every registry mirrored by the appliance's agent (certs.d).\n\
         version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{sandbox}\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n\
         [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = \"/etc/cni/net.d\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"
    )
}

/// The scheme, host and port of `url` (`https://172.22.0.1:5000` of `https://172.22.0.1:5000/files/k`).
fn origin(url: &str) -> &str {
    let host = url.find("://").map_or(0, |i| i + 3);
    url[host..].find('/').map_or(url, |end| &url[..host + end])
}

/// Step `prepare`: where reads need a credential, the host's read token (`read_token`) written first, with
/// apt's login for the agent, so that what follows downloads with it (and a Foothold node's apt source fetched
/// again when it changed); the release's binaries into
/// `/usr/local/bin` (downloaded by the host from the agent, sha256-checked by apt-helper), the kernel modules
/// and sysctls pods need, swap off, containerd set up for kubelet (restarted when its configuration or the token
/// changed: its start writes the mirror configuration with the token), and kubelet's unit enabled (kubeadm
/// starts it).
pub fn prepare(r: &Release, read_token: Option<&str>) -> String {
    let mut s = head();
    if let (Some(token), Some(first)) = (read_token, BINARIES.first()) {
        put(&mut s, READ_TOKEN, token, 0o600);
        let machine = origin(&r.binary(first).url);
        put(
            &mut s,
            APT_AUTH,
            &format!("machine {machine}\nlogin node\npassword {token}\n"),
            0o600,
        );
        // A Foothold node that booted without it could not fetch its apt source: fetched again.
        s.push_str(
            "case \"$changed\" in *read-token*) if systemctl cat foothold-apt-source.service >/dev/null 2>&1; \
             then systemctl restart foothold-apt-source.service; fi ;; esac\n",
        );
    }
    for name in BINARIES {
        let b = r.binary(name);
        let _ = write!(
            s,
            "t=/usr/local/bin/{name}\n\
             if ! echo '{sha}  '\"$t\" | sha256sum -c --status 2>/dev/null; then\n  rm -f \"$t.part\"\n  \
             /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file '{url}' \"$t.part\" 'SHA256:{sha}' >&2\n  \
             chmod 755 \"$t.part\"\n  sync \"$t.part\"\n  mv \"$t.part\" \"$t\"\n  changed=\"$changed $t\"\nfi\n",
            sha = b.sha256,
            url = b.url
        );
    }
    put(
        &mut s,
        "/etc/modules-load.d/foothold-kubernetes.conf",
        "overlay\nbr_netfilter\n",
        0o644,
    );
    put(
        &mut s,
        "/etc/sysctl.d/61-foothold-kubernetes.conf",
        "# Pods: forwarded between nodes, and through kube-proxy's iptables rules on the cni0 bridge.\n\
         net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n",
        0o644,
    );
    s.push_str(
        "modprobe overlay\nmodprobe br_netfilter\nsysctl -q -p /etc/sysctl.d/61-foothold-kubernetes.conf\nswapoff -a\n",
    );
    put(
        &mut s,
        "/etc/containerd/config.toml",
        &containerd_config(&r.sandbox_image),
        0o644,
    );
    s.push_str(
        "case \"$changed\" in *containerd/config.toml*|*/etc/foothold/read-token*) systemctl restart containerd ;; esac\n\
         i=0; until [ -S /run/containerd/containerd.sock ]; do i=$((i+1)); [ $i -le 120 ] || { echo 'containerd did not come back within 120 s' >&2; exit 1; }; sleep 1; done\n",
    );
    put(
        &mut s,
        "/etc/systemd/system/kubelet.service",
        KUBELET_UNIT,
        0o644,
    );
    put(
        &mut s,
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        KUBELET_KUBEADM,
        0o644,
    );
    enable(&mut s, &["kubelet.service"]);
    done(&mut s, &format!("prepared for Kubernetes {}", r.version));
    s
}

/// Waits up to `secs` for the API server behind `kubeconfig` to be ready, else fails saying so.
fn wait_ready(s: &mut String, kubeconfig: &str, secs: u32) {
    let _ = writeln!(
        s,
        "i=0; until kubectl --kubeconfig={kubeconfig} get --raw=/readyz >/dev/null 2>&1; do i=$((i+1)); \
         [ $i -le {secs} ] || {{ echo 'the API server did not become ready within {secs} s' >&2; exit 1; }}; sleep 1; done"
    );
}

/// A marker saying this host's kubeadm step finished for `cluster`; a host that finished it for another
/// cluster is refused.
fn marker_check(s: &mut String, marker: &str, cluster: &str, then: &str) {
    let _ = write!(
        s,
        "m={DIR}/{marker}\nif [ -f \"$m\" ]; then\n  if [ \"$(cat \"$m\")\" != '{cluster}' ]; then\n    \
         echo \"this host is already in cluster $(cat \"$m\"), not {cluster}: reset it first\" >&2; exit 1\n  fi\n{then}fi\n"
    );
}

/// kubeadm's patches (`kubeadm::patches`) for `images`, in the directory its configurations name.
fn put_patches(s: &mut String, images: &Images) {
    for (name, patch) in super::kubeadm::patches(images) {
        put(
            s,
            &format!("{}/{name}", super::kubeadm::PATCHES_DIR),
            &patch,
            0o644,
        );
    }
}

/// Step `kubeadm init` on the first control-plane host with `config` (`kubeadm::init`). Skipped when this host
/// initialised `cluster` before (then it waits for its API server); a control plane left half-made by a failed
/// run is reset first.
pub fn init(cluster: &str, config: &str, images: &Images) -> String {
    let mut s = head();
    put(&mut s, &format!("{DIR}/init.yaml"), config, 0o600);
    put_patches(&mut s, images);
    let mut then = String::new();
    wait_ready(&mut then, ADMIN_CONF, 900);
    let _ = writeln!(then, "  echo '{DONE} already initialised'; exit 0");
    marker_check(&mut s, "initialised", cluster, &then);
    let _ = write!(
        s,
        "reset=''\nif [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ] || [ -e {ADMIN_CONF} ]; then\n  \
         kubeadm reset -f >&2\n  reset=' (after resetting the control plane a failed run left)'\nfi\n\
         kubeadm init --config {DIR}/init.yaml >&2\n"
    );
    wait_ready(&mut s, ADMIN_CONF, 900);
    let _ = write!(
        s,
        "echo '{cluster}' > {DIR}/initialised.part\nsync {DIR}/initialised.part\nmv {DIR}/initialised.part {DIR}/initialised\n\
         echo \"{DONE} initialised$reset\"\n"
    );
    s
}

/// Step `kubeadm join` with `config` (`kubeadm::join`). Skipped when this host joined `cluster` before; a
/// host left half-joined is reset first: by anything a join writes (a join that failed at `kubelet-start`
/// leaves the bootstrap kubeconfig and the CA, and kubeadm's preflight then refuses every later join).
pub fn join(cluster: &str, config: &str, images: &Images) -> String {
    let mut s = head();
    put(&mut s, &format!("{DIR}/join.yaml"), config, 0o600);
    put_patches(&mut s, images);
    marker_check(
        &mut s,
        "joined",
        cluster,
        &format!("  echo '{DONE} already joined'; exit 0\n"),
    );
    let _ = write!(
        s,
        "reset=''\nif [ -e /etc/kubernetes/kubelet.conf ] || [ -e /etc/kubernetes/bootstrap-kubelet.conf ] || \
         [ -e /etc/kubernetes/pki/ca.crt ]; then\n  kubeadm reset -f >&2\n  \
         reset=' (after resetting what a failed run left)'\nfi\n\
         kubeadm join --config {DIR}/join.yaml >&2\n\
         echo '{cluster}' > {DIR}/joined.part\nsync {DIR}/joined.part\nmv {DIR}/joined.part {DIR}/joined\n\
         echo \"{DONE} joined$reset\"\n"
    );
    s
}

/// Step `reset` on a host leaving `cluster`: kubelet, kube-proxy and the pod routes stopped and disabled,
/// `kubeadm reset`, and what the installer wrote for the cluster (its markers, kube-proxy's files and unit, the
/// CNI configuration and bridge) removed, so that the host can join a cluster again. A host that joined
/// another cluster is left alone. What `prepare` installed (binaries, containerd) stays.
pub fn reset(cluster: &str) -> String {
    let mut s = head();
    let _ = write!(
        s,
        "for m in {DIR}/joined {DIR}/initialised; do\n  \
         if [ -f \"$m\" ] && [ \"$(cat \"$m\")\" != '{cluster}' ]; then\n    \
         echo \"this host is in cluster $(cat \"$m\"), not {cluster}: left as it is\" >&2; exit 1\n  fi\ndone\n\
         systemctl disable -q --now kubelet.service kube-proxy.service foothold-pod-routes.service 2>/dev/null || true\n\
         if command -v kubeadm >/dev/null; then kubeadm reset -f >&2; fi\n\
         rm -f {DIR}/joined {DIR}/initialised {DIR}/join.yaml {DIR}/kube-proxy.conf {DIR}/kube-proxy.yaml \\\n  \
         /etc/systemd/system/kube-proxy.service /etc/systemd/system/foothold-pod-routes.service \\\n  \
         /etc/cni/net.d/10-foothold.conflist\n\
         systemctl daemon-reload\nip link delete cni0 2>/dev/null || true\necho '{DONE} reset'\n"
    );
    s
}

/// On the first control-plane host: kube-proxy's kubeconfig (a client certificate for `system:kube-proxy`,
/// which Kubernetes' default RBAC binds to `system:node-proxier`), made once and printed.
pub fn kube_proxy_kubeconfig() -> String {
    let mut s = head();
    let _ = write!(
        s,
        "f={DIR}/kube-proxy.conf\nif [ ! -s \"$f\" ]; then\n  \
         kubeadm kubeconfig user --config {DIR}/init.yaml --client-name system:kube-proxy > \"$f.part\"\n  \
         chmod 600 \"$f.part\"\n  sync \"$f.part\"\n  mv \"$f.part\" \"$f\"\nfi\ncat \"$f\"\n"
    );
    s
}

/// Step `kube-proxy`: the service proxy as a host service (iptables mode), with `kubeconfig`.
pub fn kube_proxy(node: &str, pod_subnet: &str, kubeconfig: &str) -> String {
    let mut s = head();
    put(&mut s, &format!("{DIR}/kube-proxy.conf"), kubeconfig, 0o600);
    put(
        &mut s,
        &format!("{DIR}/kube-proxy.yaml"),
        &format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
             clientConnection: {{kubeconfig: {DIR}/kube-proxy.conf}}\nmode: iptables\n\
             clusterCIDR: \"{pod_subnet}\"\nhostnameOverride: \"{node}\"\n"
        ),
        0o644,
    );
    put(
        &mut s,
        "/etc/systemd/system/kube-proxy.service",
        &format!(
            "[Unit]\nDescription=kube-proxy: the Kubernetes service proxy (installed by foothold-agent install-cluster)\n\
             After=network-online.target\n\n[Service]\nExecStart=/usr/local/bin/kube-proxy --config={DIR}/kube-proxy.yaml\n\
             Restart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
        0o644,
    );
    enable(&mut s, &["kube-proxy.service"]);
    s.push_str(
        "if [ -n \"$changed\" ]; then systemctl restart kube-proxy.service; else systemctl start kube-proxy.service; fi\n",
    );
    done(&mut s, "kube-proxy running");
    s
}

/// Step `pod network`: the bridge CNI plugin with this node's pod range (`pod_cidr`, which the controller
/// manager gave the node), and a route to every other node's range via that node (`(range, address)`), kept
/// by a unit so they come back at boot ([`pod_routes_unit`]).
pub fn network(pod_cidr: &str, routes: &[(String, String)]) -> String {
    let mut s = head();
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "foothold",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    });
    put(
        &mut s,
        "/etc/cni/net.d/10-foothold.conflist",
        &(serde_json::to_string_pretty(&conf).expect("JSON") + "\n"),
        0o644,
    );
    put(
        &mut s,
        "/etc/systemd/system/foothold-pod-routes.service",
        &pod_routes_unit(routes),
        0o644,
    );
    enable(&mut s, &["foothold-pod-routes.service"]);
    s.push_str("systemctl restart foothold-pod-routes.service\n");
    done(&mut s, &format!("pod network {pod_cidr}"));
    s
}

/// The unit that keeps the routes to the other nodes' pod ranges (`(range, address)`). A cluster of one node has
/// none: its unit runs `true` (systemd refuses a service with no `ExecStart`; a node added later rewrites it).
fn pod_routes_unit(routes: &[(String, String)]) -> String {
    let mut unit = String::from(
        "[Unit]\nDescription=Routes to the other nodes' pod ranges (installed by foothold-agent install-cluster)\n\
         After=network-online.target\nWants=network-online.target\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n",
    );
    for (range, via) in routes {
        let _ = writeln!(
            unit,
            "ExecStart=/usr/sbin/ip route replace {range} via {via}"
        );
    }
    if routes.is_empty() {
        unit.push_str(
            "# The cluster's only node: no other pod range to route.\nExecStart=/usr/bin/true\n",
        );
    }
    unit.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release() -> Release {
        let text = crate::installer::release::sample("https://172.22.0.1:5000/files/k").to_string();
        Release::parse(&text).unwrap()
    }

    /// Runs `script` with `sh` in a scratch root: paths under `/etc` are rewritten into it.
    fn sh(root: &std::path::Path, script: &str) -> String {
        let script = script.replace("t='/etc", &format!("t='{}/etc", root.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// `put` writes the exact bytes once, and a second run finds them there.
    #[test]
    fn a_file_is_written_once_with_its_exact_content() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = head();
        put(
            &mut s,
            "/etc/x/a.conf",
            "one\n  two 'quoted' $HOME `x`\n",
            0o600,
        );
        put(&mut s, "/etc/x/b", "no newline", 0o644);
        done(&mut s, "files");
        let first = sh(dir.path(), &s);
        assert!(first.starts_with("FOOTHOLD-STEP files (wrote "), "{first}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("etc/x/a.conf")).unwrap(),
            "one\n  two 'quoted' $HOME `x`\n"
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("etc/x/a.conf"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(sh(dir.path(), &s), "FOOTHOLD-STEP files (unchanged)\n");
    }

    #[test]
    fn prepare_fetches_every_binary_by_its_digest_and_sets_containerd_up_for_kubelet() {
        let s = prepare(&release(), None);
        assert!(
            !s.contains(&format!("t='{READ_TOKEN}'")) && !s.contains(APT_AUTH),
            "no token, none written:\n{s}"
        );
        for name in BINARIES {
            assert!(
                s.contains(&format!("download-file 'https://172.22.0.1:5000/files/k/{name}' \"$t.part\" 'SHA256:{}'", "ab".repeat(32))),
                "{name} in\n{s}"
            );
        }
        assert!(s.contains(&format!(
            "sandbox_image = \"registry.k8s.io/pause:3.10.1@sha256:{}\"",
            "cd".repeat(32)
        )));
        assert!(s.contains("SystemdCgroup = true"));
        assert!(s.contains("systemctl enable -q --no-reload kubelet.service;"));
    }

    /// Where reads need a credential, the token is on the host before anything is downloaded, 0600, with apt's
    /// login for the agent the release names (the text a Foothold node's apt-source writes); when it changed,
    /// containerd restarted (its start puts the token into the mirror configuration) and a Foothold node's apt
    /// source fetched again.
    #[test]
    fn prepare_writes_the_read_token_before_it_downloads() {
        let s = prepare(&release(), Some("t0k-en_"));
        let token = s.find(&format!("t='{READ_TOKEN}'")).expect(READ_TOKEN);
        let auth = s.find(&format!("t='{APT_AUTH}'")).expect(APT_AUTH);
        let download = s.find("download-file").unwrap();
        assert!(token < download && auth < download, "{s}");
        assert!(s.contains(&format!(
            "t='{APT_AUTH}'\nmkdir -p \"$(dirname \"$t\")\"\ncat > \"$t.foothold\" <<'{END}'\n\
             machine https://172.22.0.1:5000\nlogin node\npassword t0k-en_\n{END}\nchmod 600 "
        )));
        assert!(s.contains(&format!("t0k-en_\n{END}\nchmod 600 \"$t.foothold\"")));
        assert!(s.contains(&format!(
            "*containerd/config.toml*|*{READ_TOKEN}*) systemctl restart containerd"
        )));
        assert!(s.contains("then systemctl restart foothold-apt-source.service; fi"));
        assert_eq!(
            origin("https://172.22.0.1:5000/files/k/kubeadm"),
            "https://172.22.0.1:5000"
        );
        assert_eq!(origin("http://[fd00::1]:5000/f"), "http://[fd00::1]:5000");
        assert_eq!(origin("http://a"), "http://a");
    }

    /// A unit written or enabled makes one reload; a second run, with nothing to change, none.
    #[test]
    fn systemd_is_reloaded_only_when_a_unit_changed() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let calls = dir.path().join("calls");
        let enabled = dir.path().join("enabled");
        // systemctl as far as these scripts use it: `is-enabled` answers from a marker `enable` makes.
        std::fs::write(
            bin.join("systemctl"),
            format!(
                "#!/bin/sh\necho \"$*\" >> '{calls}'\n\
                 case \"$1\" in is-enabled) [ -e '{enabled}' ] ;; enable) touch '{enabled}' ;; esac\n",
                calls = calls.display(),
                enabled = enabled.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            bin.join("systemctl"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let mut s = format!("PATH='{}':\"$PATH\"\n", bin.display());
        s.push_str(&head());
        put(
            &mut s,
            "/etc/systemd/system/x.service",
            "[Service]\nExecStart=/bin/true\n",
            0o644,
        );
        enable(&mut s, &["x.service"]);
        let run = || {
            let _ = std::fs::remove_file(&calls);
            sh(dir.path(), &s);
            std::fs::read_to_string(&calls).unwrap()
        };
        assert_eq!(
            run(),
            "is-enabled -q x.service\nenable -q --no-reload x.service\ndaemon-reload\n"
        );
        assert_eq!(run(), "is-enabled -q x.service\n");
        // The unit disabled by hand: enabled again, and systemd told.
        std::fs::remove_file(&enabled).unwrap();
        assert_eq!(
            run(),
            "is-enabled -q x.service\nenable -q --no-reload x.service\ndaemon-reload\n"
        );
    }

    #[test]
    fn kubeadm_steps_are_guarded_by_their_markers() {
        let s = init("c1", "kind: InitConfiguration\n", &release().images);
        // With kubeadm's patches: the control plane's images by digest.
        assert!(
            s.contains("t='/etc/foothold/kubernetes/patches/kube-apiserver+strategic.yaml'\n")
                && s.contains(&format!(
                    "    image: registry.k8s.io/kube-apiserver:v1.35.4@sha256:{}\n",
                    "cd".repeat(32)
                )),
            "{s}"
        );
        assert!(
            s.contains("m=/etc/foothold/kubernetes/initialised\n"),
            "{s}"
        );
        assert!(s.contains("kubeadm reset -f"), "{s}");
        assert!(s.find("already initialised").unwrap() < s.find("kubeadm init").unwrap());
        let s = join("c1", "kind: JoinConfiguration\n", &release().images);
        assert!(s.contains("not c1: reset it first"), "{s}");
        assert!(s.find("already joined").unwrap() < s.find("kubeadm join").unwrap());
        // A join that failed at kubelet-start leaves these two, not kubelet.conf: each makes the next run reset.
        for left in [
            "[ -e /etc/kubernetes/bootstrap-kubelet.conf ]",
            "[ -e /etc/kubernetes/pki/ca.crt ]",
        ] {
            assert!(
                s.find(left).unwrap() < s.find("kubeadm reset -f").unwrap(),
                "{s}"
            );
        }
    }

    #[test]
    fn a_leaving_host_is_reset_only_from_its_own_cluster_and_can_join_again() {
        let s = reset("c1");
        let check = std::process::Command::new("sh")
            .args(["-n", "-c", &s])
            .output()
            .unwrap();
        assert!(check.status.success(), "{check:?}");
        let at = |what: &str| s.find(what).unwrap_or_else(|| panic!("{what}: {s}"));
        // Another cluster's host is left alone before anything stops.
        assert!(at("!= 'c1'") < at("systemctl disable"));
        // kubelet stopped and disabled first, so it cannot register the Node again once it is deleted.
        assert!(at("disable -q --now kubelet.service") < at("kubeadm reset -f"));
        // The markers go, so a later join of this host is not refused as "already in cluster c1".
        for gone in [
            "/etc/foothold/kubernetes/joined",
            "/etc/foothold/kubernetes/initialised",
            "/etc/cni/net.d/10-foothold.conflist",
        ] {
            assert!(s.rfind(gone) > Some(at("kubeadm reset -f")), "{gone}");
        }
        assert!(s.trim_end().ends_with(&format!("echo '{DONE} reset'")));
    }

    #[test]
    fn the_pod_network_routes_to_every_other_node() {
        let s = network(
            "10.244.1.0/24",
            &[
                ("10.244.0.0/24".into(), "192.168.50.10".into()),
                ("10.244.2.0/24".into(), "192.168.50.12".into()),
            ],
        );
        assert!(s.contains("\"subnet\": \"10.244.1.0/24\""), "{s}");
        assert!(
            s.contains("ExecStart=/usr/sbin/ip route replace 10.244.0.0/24 via 192.168.50.10\n")
        );
        assert!(
            s.contains("ExecStart=/usr/sbin/ip route replace 10.244.2.0/24 via 192.168.50.12\n")
        );
        assert!(!s.contains("/usr/bin/true"), "{s}");
    }

    /// The only node of a cluster routes nothing, and its unit is still one systemd starts (a oneshot service
    /// without `ExecStart` is refused: "has a bad unit file setting", seen on a master-only cluster).
    #[test]
    fn a_single_node_has_a_pod_routes_unit_systemd_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let text = pod_routes_unit(&[]);
        assert!(text.contains("\nExecStart=/usr/bin/true\n"), "{text}");
        assert!(!text.contains("ip route"), "{text}");
        let unit = dir.path().join("foothold-pod-routes.service");
        std::fs::write(&unit, &text).unwrap();
        let verify = std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .expect("systemd-analyze (Debian's systemd package) runs");
        assert!(
            verify.status.success(),
            "{}",
            String::from_utf8_lossy(&verify.stderr)
        );
    }
}
