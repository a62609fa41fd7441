//! kubeadm's configuration for a workload cluster (API `kubeadm.k8s.io/v1beta4`, kubeadm ≥ 1.31): the first
//! control-plane host's `kubeadm init --config`, and every other host's `kubeadm join --config`. Pure: the
//! cluster's parameters in, YAML out. The images keep their upstream names (`registry.k8s.io/...`), each pinned
//! to the digest the release names (`Release::images`): the hosts' containerd pulls them through the
//! appliance's mirror.
//!
//! Checked by hand on 2026-11-24: `kubeadm config validate` of the v1.35.4 kubeadm the appliance builds accepts
//! the init, join and control-plane join configurations (and refuses an unknown field or a malformed token in
//! them, so it reads them strictly). On 2026-11-25 it accepted the init configuration with `patches`, and its
//! `init phase control-plane --dry-run` wrote the API server's manifest with the patched probe. No test runs
//! kubeadm here: the agent's tests run before any kubeadm is built; `tests/appliance.rs` runs it on real hosts.

use std::fmt::Write as _;

use super::release::{kubeadm_parts, Images};

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
    /// The images the cluster runs, by digest.
    pub images: &'a Images,
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
    out.push_str(SKIP_KUBE_PROXY);
    out.push_str(&patches_field());
    out.push_str(TIMEOUTS);
    let _ = write!(
        out,
        "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: {name}\nkubernetesVersion: {version}\ncontrolPlaneEndpoint: \"{endpoint}\"\nimageRepository: registry.k8s.io\nnetworking:\n  podSubnet: \"{pods}\"\n  serviceSubnet: \"{SERVICE_SUBNET}\"\n  dnsDomain: cluster.local\n",
        name = c.name,
        version = c.version,
        endpoint = api_endpoint(c.endpoint),
        pods = c.pod_subnet
    );
    out.push_str(&pinned_images(c.images));
    out.push_str(NO_LEADER_ELECTION);
    out.push_str(ECDSA);
    out.push_str(KUBELET);
    out
}

/// The cluster's keys and certificates on P-256 instead of kubeadm's default RSA-2048: every TLS handshake costs
/// each side one signature and the checks of the other's, and an RSA-2048 signature costs 13 times a P-256 one
/// (OpenSSL on this project's machine: 287 µs against 22 µs; a P-256 check costs 4 times an RSA one, 65 µs
/// against 16), so by these figures a handshake costs about half. On a slow or emulated control-plane host the handshakes of every
/// component and of each retry pile up: seen under TCG, the API server's log ended in failed handshakes with
/// etcd ("authentication handshake failed" on 127.0.0.1:2379) and it crash-looped, and clients met "TLS
/// handshake timeout". kubeadm v1.35.4 accepts it and makes P-256 keys (checked by hand, 2026-11-26).
const ECDSA: &str = "encryptionAlgorithm: ECDSA-P256\n";

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
    out.push_str(&patches_field());
    out.push_str(TIMEOUTS);
    if control_plane {
        let _ = write!(
            out,
            "controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: \"{}\"\n    bindPort: 6443\n",
            n.ip
        );
    }
    out
}

/// CoreDNS and etcd by the digests of `images`: kubeadm composes `<imageRepository>/coredns:<imageTag>` (and
/// `/etcd:` alike), and keeps a digest in the tag (kubeadm v1.35.4's `config images list` names
/// `registry.k8s.io/coredns/coredns:v1.13.1@sha256:…`, and its `init phase etcd local --dry-run` writes etcd's
/// manifest with it; checked by hand on 2026-12-01). The control plane's other images are set by [`patches`].
fn pinned_images(images: &Images) -> String {
    const CHECKED: &str = "Release::parse checked the images' references";
    let (dns_repository, dns_tag) = kubeadm_parts(&images.coredns, "coredns").expect(CHECKED);
    let (etcd_repository, etcd_tag) = kubeadm_parts(&images.etcd, "etcd").expect(CHECKED);
    format!(
        "dns:\n  imageRepository: {dns_repository}\n  imageTag: \"{dns_tag}\"\netcd:\n  local:\n    \
         imageRepository: {etcd_repository}\n    imageTag: \"{etcd_tag}\"\n"
    )
}

/// The controller manager and the scheduler of a cluster of one control-plane host (all the installer makes)
/// have no one to elect: with leader election, a control plane too slow to renew its lease within the 10 s
/// deadline (an emulated or overloaded host) makes both exit, and kubelet's crash-loop backoff keeps them down
/// for minutes, so bootstrap tokens go unsigned and joins wait out their discovery timeout. A second
/// control-plane host would need election back.
const NO_LEADER_ELECTION: &str = "controllerManager:\n  extraArgs:\n  - name: leader-elect\n    value: \"false\"\nscheduler:\n  extraArgs:\n  - name: leader-elect\n    value: \"false\"\n";

/// Where each host's kubeadm finds [`patches`].
pub const PATCHES_DIR: &str = "/etc/foothold/kubernetes/patches";

fn patches_field() -> String {
    format!("patches:\n  directory: {PATCHES_DIR}\n")
}

/// The control plane's static pods as kubeadm writes them, with liveness probes that wait 30 s for an answer
/// and give up after 30 missed ones (5 minutes) instead of 15 s and 8: on a small or emulated host a slow
/// `/livez` is load, not a hang, and a killed API server or etcd only adds the load of its restart (seen here:
/// the API server of a 1-vCPU host killed and restarted four times mid-install, which then refused the
/// installer). Startup probes already follow `controlPlaneComponentHealthCheck`. And each container's image by
/// the digest `images` names (kubeadm has no field for these: it names them by `kubernetesVersion`). `(file
/// name, strategic merge patch)` pairs.
pub fn patches(images: &Images) -> Vec<(String, String)> {
    images
        .all()
        .into_iter()
        .filter(|(c, _)| *c != "coredns")
        .map(|(c, image)| {
            (
                format!("{c}+strategic.yaml"),
                format!(
                    "spec:\n  containers:\n  - name: {c}\n    image: {image}\n    livenessProbe:\n      \
                     timeoutSeconds: 30\n      failureThreshold: 30\n"
                ),
            )
        })
        .collect()
}

/// kube-proxy runs as a host service (its image would need iptables inside; the hosts have it), so kubeadm
/// does not deploy its DaemonSet.
const SKIP_KUBE_PROXY: &str = "skipPhases: [addon/kube-proxy]\n";

/// kubeadm's waits, stretched from their 4- and 5-minute defaults: a control plane on a small or emulated host
/// takes longer to answer, and a failed wait leaves the installer a half-made host to reset.
const TIMEOUTS: &str = "timeouts:\n  controlPlaneComponentHealthCheck: 15m0s\n  kubeletHealthCheck: 10m0s\n  kubernetesAPICall: 2m0s\n  discovery: 10m0s\n  tlsBootstrap: 10m0s\n";

/// kubeadm's `--discovery-token-ca-cert-hash` of a CA certificate (PEM): `sha256:` and the hex SHA-256 of its
/// DER SubjectPublicKeyInfo.
pub fn ca_cert_hash(pem: &str) -> Result<String, String> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let body: String = pem
        .lines()
        .skip_while(|l| l.trim() != "-----BEGIN CERTIFICATE-----")
        .skip(1)
        .take_while(|l| l.trim() != "-----END CERTIFICATE-----")
        .map(str::trim)
        .collect();
    if body.is_empty() {
        return Err("no PEM certificate".into());
    }
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the certificate's base64: {e}"))?;
    let spki = subject_public_key_info(&der).ok_or("not a DER X.509 certificate")?;
    Ok(format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(spki))
    ))
}

/// One DER element: its tag, the whole element, its contents, and what follows it.
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// The DER element at the start of `b`.
fn element(b: &[u8]) -> Option<Element<'_>> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &d| (a << 8) | usize::from(d));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = b.len() - rest.len();
    Some((tag, &b[..header + len], &rest[..len], &rest[len..]))
}

/// The SubjectPublicKeyInfo element of an X.509 certificate: the seventh field of its TBSCertificate, or the
/// sixth when the version is left out.
fn subject_public_key_info(der: &[u8]) -> Option<&[u8]> {
    let (0x30, _, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, _, tbs, _) = element(cert)? else {
        return None;
    };
    let mut rest = tbs;
    let mut fields = Vec::new();
    while !rest.is_empty() && fields.len() < 7 {
        let (tag, whole, _, more) = element(rest)?;
        fields.push((tag, whole));
        rest = more;
    }
    let at = if fields.first()?.0 == 0xa0 { 6 } else { 5 };
    match fields.get(at)? {
        (0x30, spki) => Some(spki),
        _ => None,
    }
}

/// The kubelet as the appliance runs its own: systemd's cgroups (containerd's runc is configured the same). A
/// container that keeps failing is restarted at least every 15 s, not after up to 300 s: the controller manager
/// exits when the API server is not healthy within 10 s of its start, which on a slow or emulated control-plane
/// host it is not at first, and kubelet's back-off (10, 20, 40, 80 s…) then kept it down minutes after the API
/// server was up (seen as the nodes' pod ranges coming two minutes after `kubeadm init`, and after each reboot).
/// `KubeletCrashLoopBackOffMax` is beta and on by default from Kubernetes 1.35. kubeadm stores this in the
/// cluster: the hosts that join get it too.
const KUBELET: &str = "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n\
                       crashLoopBackOff:\n  maxContainerRestartPeriod: 15s\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn images() -> &'static Images {
        static IMAGES: std::sync::OnceLock<Images> = std::sync::OnceLock::new();
        IMAGES.get_or_init(|| {
            let sample = crate::installer::release::sample("https://172.22.0.1:5000/files");
            crate::installer::release::Release::parse(&sample.to_string())
                .unwrap()
                .images
        })
    }

    fn cluster() -> Cluster<'static> {
        Cluster {
            name: "c1",
            version: "v1.35.4",
            endpoint: "10.0.0.5",
            pod_subnet: DEFAULT_POD_SUBNET,
            token: "abcdef.0123456789abcdef",
            images: images(),
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
            "crashLoopBackOff:\n  maxContainerRestartPeriod: 15s\n",
        ] {
            assert!(y.contains(want), "{want:?} in\n{y}");
        }
        assert_eq!(y.matches("\n---\n").count(), 2, "three documents");
        assert!(y.contains("skipPhases: [addon/kube-proxy]\n"), "{y}");
        assert!(
            y.contains("  controlPlaneComponentHealthCheck: 15m0s\n"),
            "{y}"
        );
        // In the ClusterConfiguration (the second document): no leader election for either component, and
        // P-256 keys.
        let cluster_doc = format!("{}\n", y.split("\n---\n").nth(1).unwrap());
        assert!(
            cluster_doc.contains("\nencryptionAlgorithm: ECDSA-P256\n"),
            "{cluster_doc}"
        );
        // CoreDNS and etcd by the release's digests.
        let pinned = format!("@sha256:{}", "cd".repeat(32));
        assert!(
            cluster_doc.contains(&format!(
                "\ndns:\n  imageRepository: registry.k8s.io/coredns\n  imageTag: \"v1.13.1{pinned}\"\n\
                 etcd:\n  local:\n    imageRepository: registry.k8s.io\n    imageTag: \"3.6.6-0{pinned}\"\n"
            )),
            "{cluster_doc}"
        );
        for component in ["controllerManager", "scheduler"] {
            let want = format!(
                "{component}:\n  extraArgs:\n  - name: leader-elect\n    value: \"false\"\n"
            );
            assert!(cluster_doc.contains(&want), "{want:?} in\n{cluster_doc}");
        }
        // In the InitConfiguration: the patches' directory.
        let init_doc = y.split("\n---\n").next().unwrap();
        assert!(
            init_doc.contains("patches:\n  directory: /etc/foothold/kubernetes/patches\n"),
            "{init_doc}"
        );
    }

    #[test]
    fn every_control_plane_pod_gets_its_image_by_digest_and_a_patient_liveness_probe() {
        let p = patches(images());
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        // kubeadm's patch targets, each a strategic merge patch.
        assert_eq!(
            names,
            [
                "kube-apiserver+strategic.yaml",
                "kube-controller-manager+strategic.yaml",
                "kube-scheduler+strategic.yaml",
                "etcd+strategic.yaml",
            ]
        );
        for (name, patch) in &p {
            let container = name.strip_suffix("+strategic.yaml").unwrap();
            // The containers list merges by name: the patch must name the container kubeadm writes. (kubeadm
            // v1.35.4's `init phase control-plane --dry-run` applied these, checked by hand on 2026-11-25, and
            // wrote the API server's manifest with the patched image on 2026-12-01.)
            let tag = if container == "etcd" {
                "3.6.6-0"
            } else {
                "v1.35.4"
            };
            assert_eq!(
                *patch,
                format!(
                    "spec:\n  containers:\n  - name: {container}\n    image: \
                     registry.k8s.io/{container}:{tag}@sha256:{}\n    livenessProbe:\n      \
                     timeoutSeconds: 30\n      failureThreshold: 30\n",
                    "cd".repeat(32)
                )
            );
        }
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

    /// The hash of a certificate openssl makes is the one openssl's own pipeline gives (kubeadm's documented way:
    /// `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum`).
    #[test]
    fn the_ca_hash_is_the_one_openssl_gives() {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        for (kind, opts) in [
            ("ec", "ec_paramgen_curve:P-256"),
            ("rsa", "rsa_keygen_bits:2048"),
        ] {
            let cert = dir.path().join(format!("{kind}.pem"));
            let ok = Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    kind,
                    "-pkeyopt",
                    opts,
                    "-nodes",
                    "-subj",
                    "/CN=kubernetes",
                ])
                .args(["-days", "1", "-keyout"])
                .arg(dir.path().join("key.pem"))
                .arg("-out")
                .arg(&cert)
                .output()
                .unwrap();
            assert!(ok.status.success(), "{ok:?}");
            let want = Command::new("sh")
                .arg("-c")
                .arg("openssl x509 -pubkey -noout -in \"$1\" | openssl pkey -pubin -outform der | sha256sum")
                .arg("sh")
                .arg(&cert)
                .output()
                .unwrap();
            let want = String::from_utf8(want.stdout).unwrap();
            let pem = std::fs::read_to_string(&cert).unwrap();
            assert_eq!(
                ca_cert_hash(&pem).unwrap(),
                format!("sha256:{}", want.split_whitespace().next().unwrap()),
                "{kind}"
            );
        }
        assert_eq!(ca_cert_hash("hello").unwrap_err(), "no PEM certificate");
        assert_eq!(
            ca_cert_hash("-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n")
                .unwrap_err(),
            "not a DER X.509 certificate"
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
