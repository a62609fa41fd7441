//! kubeadm's configuration for a workload cluster (API `kubeadm.k8s.io/v1beta4`, kubeadm ≥ 1.31): the first
//! control-plane host's `kubeadm init --config`, and every other host's `kubeadm join --config`. Pure: the
//! cluster's parameters in, YAML out. The images keep their upstream names (`registry.k8s.io/...`): the hosts'
//! containerd pulls them through the appliance's mirror.
//!
//! Checked by hand on 2026-11-24: `kubeadm config validate` of the v1.35.4 kubeadm the appliance builds accepts
//! the init, join and control-plane join configurations (and refuses an unknown field or a malformed token in
//! them, so it reads them strictly). No test runs kubeadm yet: the agent's tests run before any kubeadm is built.

use std::fmt::Write as _;

/// What every host's configuration shares.
#[derive(Clone, Debug)]
pub struct Cluster<'a> {
    /// `CLUSTER_NAME`.
    pub name: &'a str,
    /// The release the appliance runs, e.g. `v1.35.4`.
    pub version: &'a str,
    /// The first control-plane host's `ip`: the API server's endpoint (port 6443).
    pub endpoint: &'a str,
    /// `POD_SUBNET`, else [`DEFAULT_POD_SUBNET`].
    pub pod_subnet: &'a str,
    /// A bootstrap token ([`token`]) for the joins.
    pub token: &'a str,
}

pub const DEFAULT_POD_SUBNET: &str = "10.244.0.0/16";
pub const SERVICE_SUBNET: &str = "10.96.0.0/12";
/// containerd's CRI socket (Debian's containerd).
pub const CRI_SOCKET: &str = "unix:///run/containerd/containerd.sock";

/// One host as kubeadm names and reaches it.
#[derive(Clone, Debug)]
pub struct Node<'a> {
    pub name: &'a str,
    /// The address its kubelet (and, on a control-plane host, its API server) advertises.
    pub ip: &'a str,
}

/// A new bootstrap token: `[a-z0-9]{6}.[a-z0-9]{16}`, uniformly random.
pub fn token() -> String {
    use rand::Rng as _;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut pick = |n: usize| -> String {
        (0..n)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    };
    let id = pick(6);
    format!("{id}.{}", pick(16))
}

/// The API server's address as kubeadm wants it: `host:6443`, an IPv6 address in brackets.
fn api_endpoint(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:6443")
    } else {
        format!("{ip}:6443")
    }
}

fn node_registration(out: &mut String, n: &Node) {
    let _ = write!(
        out,
        "nodeRegistration:\n  name: {name}\n  criSocket: {CRI_SOCKET}\n  kubeletExtraArgs:\n  - name: node-ip\n    value: \"{ip}\"\n",
        name = n.name,
        ip = n.ip
    );
}

/// `kubeadm init --config` for the first control-plane host `n`.
pub fn init(c: &Cluster, n: &Node) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nbootstrapTokens:\n- token: \"{token}\"\n  ttl: 2h0m0s\n  usages: [signing, authentication]\n  groups: [\"system:bootstrappers:kubeadm:default-node-token\"]\nlocalAPIEndpoint:\n  advertiseAddress: \"{ip}\"\n  bindPort: 6443\n",
        token = c.token,
        ip = n.ip
    );
    node_registration(&mut out, n);
    let _ = write!(
        out,
        "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: {name}\nkubernetesVersion: {version}\ncontrolPlaneEndpoint: \"{endpoint}\"\nimageRepository: registry.k8s.io\nnetworking:\n  podSubnet: \"{pods}\"\n  serviceSubnet: \"{SERVICE_SUBNET}\"\n  dnsDomain: cluster.local\n",
        name = c.name,
        version = c.version,
        endpoint = api_endpoint(c.endpoint),
        pods = c.pod_subnet
    );
    out.push_str(KUBELET);
    out
}

/// `kubeadm join --config` for host `n`, trusting the cluster CA whose public key hashes to `ca_hash`
/// (`sha256:<hex>`); `control_plane` joins it as another control-plane host.
pub fn join(c: &Cluster, n: &Node, ca_hash: &str, control_plane: bool) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: \"{endpoint}\"\n    token: \"{token}\"\n    caCertHashes: [\"{ca_hash}\"]\n",
        endpoint = api_endpoint(c.endpoint),
        token = c.token
    );
    node_registration(&mut out, n);
    if control_plane {
        let _ = write!(
            out,
            "controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: \"{}\"\n    bindPort: 6443\n",
            n.ip
        );
    }
    out
}

/// The kubelet as the appliance runs its own: systemd's cgroups (containerd's runc is configured the same).
const KUBELET: &str = "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Cluster<'static> {
        Cluster {
            name: "c1",
            version: "v1.35.4",
            endpoint: "10.0.0.5",
            pod_subnet: DEFAULT_POD_SUBNET,
            token: "abcdef.0123456789abcdef",
        }
    }

    #[test]
    fn init_names_the_release_the_endpoint_and_the_subnets() {
        let y = init(
            &cluster(),
            &Node {
                name: "master-0",
                ip: "10.0.0.5",
            },
        );
        for want in [
            "kind: InitConfiguration\n",
            "- token: \"abcdef.0123456789abcdef\"\n",
            "  advertiseAddress: \"10.0.0.5\"\n",
            "  name: master-0\n",
            "kubernetesVersion: v1.35.4\n",
            "controlPlaneEndpoint: \"10.0.0.5:6443\"\n",
            "  podSubnet: \"10.244.0.0/16\"\n",
            "cgroupDriver: systemd\n",
        ] {
            assert!(y.contains(want), "{want:?} in\n{y}");
        }
        assert_eq!(y.matches("\n---\n").count(), 2, "three documents");
    }

    #[test]
    fn a_join_trusts_the_ca_hash_and_a_control_plane_join_advertises_itself() {
        let n = Node {
            name: "worker-0",
            ip: "fd00::6",
        };
        let y = join(&cluster(), &n, "sha256:00ff", false);
        assert!(y.contains("    caCertHashes: [\"sha256:00ff\"]\n"), "{y}");
        assert!(y.contains("    value: \"fd00::6\"\n"), "{y}");
        assert!(!y.contains("controlPlane:"), "{y}");
        let y = join(
            &Cluster {
                endpoint: "fd00::5",
                ..cluster()
            },
            &n,
            "sha256:00ff",
            true,
        );
        assert!(y.contains("apiServerEndpoint: \"[fd00::5]:6443\""), "{y}");
        assert!(
            y.contains("controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: \"fd00::6\"\n"),
            "{y}"
        );
    }

    #[test]
    fn tokens_have_kubeadms_shape_and_differ() {
        let t = token();
        let (id, secret) = t.split_once('.').unwrap();
        assert_eq!((id.len(), secret.len()), (6, 16));
        assert!(t
            .bytes()
            .all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit()));
        assert_ne!(token(), token());
    }
}
