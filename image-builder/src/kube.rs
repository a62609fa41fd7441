//! The single-node Kubernetes of an image with `components.kubernetes`: the configuration its bring-up reads,
//! rendered from the spec as (path, text, mode). Pure: `build` writes these files into the root; the units and
//! scripts that use them are in the overlay (`rootfs/`). Nothing secret is rendered here: certificates and
//! kubeconfigs are made on the appliance at first boot (`foothold-kube-pki`), so no two appliances share them.

use std::net::Ipv4Addr;

use crate::spec::{Kubernetes, Spec};

/// The interface that carries the node's address: a dummy, so the cluster comes up whatever cables and NICs the
/// appliance has (an offline site may have no default route, which is what Kubernetes would otherwise use).
pub const NODE_INTERFACE: &str = "foothold-kube";

/// The systemd units of the bring-up, enabled in images with Kubernetes.
pub const UNITS: &[&str] = &[
    "foothold-kube-pki.service",
    "foothold-kube-pki-renew.service",
    "foothold-kube-pki-renew.timer",
    "etcd.service",
    "containerd.service",
    "kube-apiserver.service",
    "kube-controller-manager.service",
    "kube-scheduler.service",
    "kubelet.service",
    "kube-proxy.service",
    "foothold-kube-addons.service",
    "foothold-kubelet-certs.service",
    "foothold-kubelet-certs.path",
];

/// Debian packages the bring-up needs beyond the boot essentials.
pub const PACKAGES: &[&str] = &[
    "containerd",
    "runc",
    "containernetworking-plugins",
    "etcd-server",
    "iptables",
    "conntrack",
    "ethtool",
    "socat",
];

/// The first address of `cidr` plus `n`.
fn nth(cidr: &str, n: u32) -> Ipv4Addr {
    let ip: Ipv4Addr = cidr
        .split('/')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("validated");
    Ipv4Addr::from(u32::from(ip) + n)
}

/// The pod range of this node: the first /24 of the pod subnet.
pub fn node_pod_cidr(k: &Kubernetes) -> String {
    format!("{}/24", nth(&k.pod_subnet, 0))
}

/// The cluster DNS Service's address: the tenth of the service subnet, as kubeadm picks it.
pub fn dns_ip(k: &Kubernetes) -> Ipv4Addr {
    nth(&k.service_subnet, 10)
}

/// How the image's own configuration names the images the build makes of pause and CoreDNS: by tag and
/// digest (`registry.k8s.io/pause:3.10.1@sha256:…`), so that what runs is what the build made even if the tag is
/// pushed again (containerd pulls by the digest; the tag says which it is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub pause: String,
    pub coredns: String,
}

impl Pinned {
    /// The references as the spec gives them, by tag: what a configuration rendered without the images
    /// names.
    pub fn by_tag(k: &Kubernetes) -> Pinned {
        Pinned {
            pause: k.pause.reference.clone(),
            coredns: k.coredns.reference.clone(),
        }
    }
}

/// Every file, as (absolute path, text, mode).
pub fn render(
    spec: &Spec,
    k: &Kubernetes,
    registries: &[String],
    agent_tls: bool,
    pinned: &Pinned,
) -> Vec<(String, String, u32)> {
    let node = &k.node_address;
    let host = &spec.hostname;
    let provisioning = spec
        .network
        .provisioning
        .as_ref()
        .map(|p| p.address.split('/').next().unwrap_or_default().to_owned());
    let scheme = if agent_tls { "https" } else { "http" };
    let mut sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned(), host.clone()];
    sans.extend(provisioning);
    let sans: String = sans.iter().map(|s| format!("    - \"{s}\"\n")).collect();
    let dns = dns_ip(k);
    let pod_cidr = node_pod_cidr(k);
    vec![
        (
            "/etc/foothold/kubernetes.env".into(),
            format!(
                "# Read by the Kubernetes bring-up (foothold-kube-* units); written by foothold-build.\n\
                 KUBE_VERSION={version}\nKUBE_NODE_NAME={host}\nKUBE_NODE_ADDRESS={node}\n\
                 KUBE_POD_SUBNET={pods}\nKUBE_SERVICE_SUBNET={services}\n\
                 FOOTHOLD_MIRROR_ENDPOINT={scheme}://127.0.0.1:5000\nFOOTHOLD_MIRROR_REGISTRIES={registries}\n",
                version = k.version,
                pods = k.pod_subnet,
                services = k.service_subnet,
                registries = registries.join(","),
            ),
            0o644,
        ),
        (
            format!("/etc/systemd/network/05-{NODE_INTERFACE}.netdev"),
            format!("[NetDev]\nName={NODE_INTERFACE}\nKind=dummy\n"),
            0o644,
        ),
        (
            format!("/etc/systemd/network/05-{NODE_INTERFACE}.network"),
            format!(
                "[Match]\nName={NODE_INTERFACE}\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nAddress={node}/32\n\
                 ConfigureWithoutCarrier=yes\nLinkLocalAddressing=no\n"
            ),
            0o644,
        ),
        (
            "/etc/kubernetes/kubeadm.yaml".into(),
            format!(
                "# Certificates and kubeconfigs only: foothold-kube-pki runs `kubeadm init phase certs` and\n\
                 # `kubeadm init phase kubeconfig` with this; the control plane runs as systemd units.\n\
                 apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint:\n  \
                 advertiseAddress: \"{node}\"\n  bindPort: 6443\nnodeRegistration:\n  name: \"{host}\"\n---\n\
                 apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: \"{version}\"\n\
                 clusterName: foothold\n\
                 # ECDSA: a tenth of RSA's key generation at first boot (a minute under emulation).\n\
                 encryptionAlgorithm: ECDSA-P256\ncertificatesDir: /etc/kubernetes/pki\ncontrolPlaneEndpoint: \"127.0.0.1:6443\"\n\
                 networking:\n  dnsDomain: cluster.local\n  podSubnet: \"{pods}\"\n  serviceSubnet: \"{services}\"\n\
                 apiServer:\n  certSANs:\n{sans}",
                version = k.version,
                pods = k.pod_subnet,
                services = k.service_subnet,
            ),
            0o644,
        ),
        (
            "/etc/default/etcd".into(),
            format!(
                "# etcd of the appliance's Kubernetes: one member, clients on 127.0.0.1 over TLS with client\n\
                 # certificates (made at first boot by foothold-kube-pki).\n\
                 ETCD_NAME=\"{host}\"\nETCD_DATA_DIR=\"/var/lib/etcd/default\"\n\
                 ETCD_LISTEN_CLIENT_URLS=\"https://127.0.0.1:2379\"\nETCD_ADVERTISE_CLIENT_URLS=\"https://127.0.0.1:2379\"\n\
                 ETCD_LISTEN_PEER_URLS=\"http://127.0.0.1:2380\"\nETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://127.0.0.1:2380\"\n\
                 ETCD_INITIAL_CLUSTER=\"{host}=http://127.0.0.1:2380\"\nETCD_INITIAL_CLUSTER_STATE=\"new\"\n\
                 ETCD_CERT_FILE=\"/etc/kubernetes/pki/etcd/server.crt\"\nETCD_KEY_FILE=\"/etc/kubernetes/pki/etcd/server.key\"\n\
                 ETCD_TRUSTED_CA_FILE=\"/etc/kubernetes/pki/etcd/ca.crt\"\nETCD_CLIENT_CERT_AUTH=\"true\"\n\
                 ETCD_LISTEN_METRICS_URLS=\"http://127.0.0.1:2381\"\n"
            ),
            0o644,
        ),
        (
            "/etc/containerd/config.toml".into(),
            format!(
                "# containerd for the appliance's kubelet: CRI with systemd cgroups, every registry mirrored by the\n\
                 # agent (certs.d, written at each start by foothold-agent mirror-config).\n\
                 version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{pause}\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = \"/etc/cni/net.d\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n",
                pause = pinned.pause
            ),
            0o644,
        ),
        (
            "/etc/cni/net.d/10-foothold.conflist".into(),
            serde_json::to_string_pretty(&serde_json::json!({
                "cniVersion": "1.0.0",
                "name": "foothold",
                "plugins": [
                    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                ],
            }))
            .expect("JSON")
                + "\n",
            0o644,
        ),
        (
            "/etc/kubernetes/kubelet-config.yaml".into(),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true}}\n  \
                 x509: {{clientCAFile: /etc/kubernetes/pki/ca.crt}}\nauthorization: {{mode: Webhook}}\n\
                 cgroupDriver: systemd\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n\
                 clusterDNS: [\"{dns}\"]\nclusterDomain: cluster.local\nfailSwapOn: false\nrotateCertificates: true\n\
                 # Its serving certificate from the cluster CA, asked for and renewed by a request the agent\n\
                 # approves (foothold-agent serve --approve-kubelet-serving): the API server verifies it.\n\
                 serverTLSBootstrap: true\n\
                 resolvConf: /etc/resolv.conf\n\
                 # An appliance's disk holds the site's images: evict only when it is really full.\n\
                 evictionHard: {{memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}}\n\
                 imageGCHighThresholdPercent: 95\nimageGCLowThresholdPercent: 90\n"
            ),
            0o644,
        ),
        (
            "/etc/kubernetes/kube-proxy-config.yaml".into(),
            format!(
                "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                 clientConnection: {{kubeconfig: /etc/kubernetes/kube-proxy.conf}}\nmode: iptables\n\
                 clusterCIDR: \"{pods}\"\nhostnameOverride: \"{host}\"\n\
                 # No NodePort on 127.0.0.1: route_localnet stays off (localhost services are not reachable\n\
                 # from the provisioning network's neighbours) and no rule drops the appliance's own traffic to\n\
                 # 127.0.0.0/8 from its other addresses.\n\
                 iptables: {{localhostNodePorts: false}}\n",
                pods = k.pod_subnet
            ),
            0o644,
        ),
        (
            "/etc/modules-load.d/foothold-kubernetes.conf".into(),
            "overlay\nbr_netfilter\n".into(),
            0o644,
        ),
        (
            "/etc/sysctl.d/61-foothold-kubernetes.conf".into(),
            "# Pods on the cni0 bridge go through kube-proxy's iptables rules.\n\
             net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n"
                .into(),
            0o644,
        ),
        (
            "/usr/local/share/foothold/addons/00-cluster-admins.yaml".into(),
            // kubeadm's admin.conf user is in this group; `kubeadm init` would bind it, the bring-up does.
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: kubeadm:cluster-admins\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n\
             subjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: \"kubeadm:cluster-admins\"}\n"
                .into(),
            0o644,
        ),
        (
            // The kubelet renews its own client certificate (rotateCertificates) by a request the controller
            // manager approves for a node asking for itself, as kubeadm binds it.
            "/usr/local/share/foothold/addons/01-kubelet-client-rotation.yaml".into(),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
             name: kubeadm:node-autoapprove-certificate-rotation\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, \
             name: \"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient\"}\n\
             subjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: \"system:nodes\"}\n"
                .into(),
            0o644,
        ),
        (
            // What the agent needs to approve the kubelet's serving certificate.
            "/usr/local/share/foothold/addons/05-kubelet-serving.yaml".into(),
            include_str!("../../agent/rbac/kubelet-serving.yaml").into(),
            0o644,
        ),
        (
            "/usr/local/share/foothold/addons/10-coredns.yaml".into(),
            coredns(&pinned.coredns, dns),
            0o644,
        ),
    ]
}

/// CoreDNS for the cluster: the kubernetes plugin answers for `cluster.local`. There is no `forward`: an
/// offline site has no upstream resolver, and CoreDNS refuses to start on a resolv.conf with no servers.
fn coredns(image: &str, dns: Ipv4Addr) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: coredns, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "system:coredns"}}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "system:coredns"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}}
subjects:
- {{kind: ServiceAccount, name: coredns, namespace: kube-system}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: coredns, namespace: kube-system}}
data:
  Corefile: |
    .:53 {{
        errors
        health {{
            lameduck 5s
        }}
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {{
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }}
        prometheus :9153
        cache 30
        reload
        loadbalance
    }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {{k8s-app: kube-dns}}
spec:
  replicas: 1
  selector:
    matchLabels: {{k8s-app: kube-dns}}
  template:
    metadata:
      labels: {{k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      tolerations:
      - {{key: CriticalAddonsOnly, operator: Exists}}
      - {{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}}
      containers:
      - name: coredns
        image: "{image}"
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {{containerPort: 53, name: dns, protocol: UDP}}
        - {{containerPort: 53, name: dns-tcp, protocol: TCP}}
        - {{containerPort: 9153, name: metrics, protocol: TCP}}
        resources:
          limits: {{memory: 170Mi}}
          requests: {{cpu: 100m, memory: 70Mi}}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {{add: [NET_BIND_SERVICE], drop: [ALL]}}
          readOnlyRootFilesystem: true
        volumeMounts:
        - {{name: config, mountPath: /etc/coredns, readOnly: true}}
        livenessProbe:
          httpGet: {{path: /health, port: 8080}}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          failureThreshold: 5
        readinessProbe:
          httpGet: {{path: /ready, port: 8181}}
      dnsPolicy: Default
      volumes:
      - name: config
        configMap:
          name: coredns
          items: [{{key: Corefile, path: Corefile}}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {{k8s-app: kube-dns, kubernetes.io/name: CoreDNS}}
spec:
  selector: {{k8s-app: kube-dns}}
  clusterIP: "{dns}"
  ports:
  - {{name: dns, port: 53, protocol: UDP}}
  - {{name: dns-tcp, port: 53, protocol: TCP}}
  - {{name: metrics, port: 9153, protocol: TCP}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        let text = format!(
            "name: a\nbase: {{suite: trixie}}\nhostname: site1\nnetwork:\n  provisioning: {{interface: ens4, address: 172.22.0.1/24}}\n\
             components:\n  kubernetes:\n    version: v1.35.4\n{}    pause: {{reference: 'registry.k8s.io/pause:3.10.1', binary: {{path: p}}}}\n    \
             coredns: {{reference: 'registry.k8s.io/coredns/coredns:v1.13.1', binary: {{path: c}}}}\n\
             outputs: {{formats: [raw], diskSize: 4GiB}}\n",
            ["kubelet", "kubeApiserver", "kubeControllerManager", "kubeScheduler", "kubeProxy", "kubectl", "kubeadm"]
                .iter()
                .map(|b| format!("    {b}: {{path: {b}}}\n"))
                .collect::<String>()
        );
        let s = crate::spec::parse(&text).unwrap();
        s.validate().unwrap();
        s
    }

    #[test]
    fn the_bring_up_configuration_follows_the_spec() {
        let s = spec();
        let k = s.components.kubernetes.as_ref().unwrap();
        let pinned = Pinned {
            pause: format!("registry.k8s.io/pause:3.10.1@sha256:{}", "1".repeat(64)),
            coredns: format!(
                "registry.k8s.io/coredns/coredns:v1.13.1@sha256:{}",
                "2".repeat(64)
            ),
        };
        let files = render(
            &s,
            k,
            &["docker.io".into(), "registry.k8s.io".into()],
            true,
            &pinned,
        );
        let get = |p: &str| {
            &files
                .iter()
                .find(|f| f.0 == p)
                .unwrap_or_else(|| panic!("{p}"))
                .1
        };
        let env = get("/etc/foothold/kubernetes.env");
        assert!(env.contains("KUBE_NODE_ADDRESS=100.127.255.1\n"), "{env}");
        assert!(
            env.contains("FOOTHOLD_MIRROR_ENDPOINT=https://127.0.0.1:5000\n"),
            "{env}"
        );
        assert!(
            env.contains("FOOTHOLD_MIRROR_REGISTRIES=docker.io,registry.k8s.io\n"),
            "{env}"
        );
        let kubeadm = get("/etc/kubernetes/kubeadm.yaml");
        for want in [
            "name: \"site1\"",
            "kubernetesVersion: \"v1.35.4\"",
            "- \"172.22.0.1\"",
            "advertiseAddress: \"100.127.255.1\"",
        ] {
            assert!(kubeadm.contains(want), "{want} in {kubeadm}");
        }
        // The images the build made, by their digests.
        assert!(get("/etc/containerd/config.toml")
            .contains(&format!("sandbox_image = \"{}\"", pinned.pause)));
        let kubelet = get("/etc/kubernetes/kubelet-config.yaml");
        assert!(
            kubelet.contains("clusterDNS: [\"10.96.0.10\"]"),
            "{kubelet}"
        );
        // Its serving certificate asked for, which the agent may approve for this signer only.
        assert!(
            kubelet.contains("\nserverTLSBootstrap: true\n"),
            "{kubelet}"
        );
        let approver = get("/usr/local/share/foothold/addons/05-kubelet-serving.yaml");
        assert!(
            approver.contains("resourceNames: [kubernetes.io/kubelet-serving]"),
            "{approver}"
        );
        let cni: serde_json::Value =
            serde_json::from_str(get("/etc/cni/net.d/10-foothold.conflist")).unwrap();
        assert_eq!(
            cni["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.0.0/24"
        );
        let dns = get("/usr/local/share/foothold/addons/10-coredns.yaml");
        assert!(
            dns.contains(&format!("image: \"{}\"", pinned.coredns)),
            "{dns}"
        );
        assert!(dns.contains("clusterIP: \"10.96.0.10\""));
        // Every manifest document is YAML.
        for (path, text, _) in files.iter().filter(|f| f.0.ends_with(".yaml")) {
            for doc in text.split("\n---\n") {
                serde_saphyr::from_str::<serde_json::Value>(doc)
                    .unwrap_or_else(|e| panic!("{path}: {e}"));
            }
        }
    }

    /// `kube-restart` (the overlay's, run by `foothold-kube-restart` after a renewal) with `systemctl` and
    /// `kubectl` stubs that log their calls: `readyz` answers `ok` from its `ok_from`-th call (0: never).
    /// Returns whether it succeeded, and the calls with its own output.
    fn kube_restart(listed: &str, ok_from: u32, limit: u32) -> (bool, String) {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let stub = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        stub(
            "systemctl",
            &format!(
                "echo \"systemctl $*\" >>'{log}'\n[ \"$*\" != '-q is-active kube-apiserver.service' ] || exit 0\n",
                log = log.display()
            ),
        );
        stub(
            "kubectl",
            &format!(
                "echo readyz >>'{log}'\nn=$(grep -c readyz '{log}')\n\
                 if [ {ok_from} -gt 0 ] && [ \"$n\" -ge {ok_from} ]; then echo ok; fi\n",
                log = log.display()
            ),
        );
        let units = dir.path().join("units");
        std::fs::write(&units, listed).unwrap();
        let out = std::process::Command::new("sh")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../rootfs/usr/local/lib/foothold/kube-restart"
            ))
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .env("FOOTHOLD_KUBE_RESTART_UNITS", &units)
            .env("FOOTHOLD_KUBE_RESTART_SECONDS", limit.to_string())
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!units.exists(), "the list is removed once used");
        (
            out.status.success(),
            format!(
                "{calls}{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// After a renewal the API server is restarted first and the rest, tier by tier, only once it answers; only
    /// what was running when the renewal ended (at boot, not what has not started yet).
    #[test]
    fn after_a_renewal_the_api_server_restarts_first_and_the_rest_once_it_answers() {
        let (ok, calls) = kube_restart(
            " kube-apiserver.service kube-scheduler.service foothold-agent.service\n",
            1,
            900,
        );
        assert!(ok, "{calls}");
        let restarts: Vec<&str> = calls
            .lines()
            .filter(|l| l.starts_with("systemctl try-restart") || *l == "readyz")
            .collect();
        assert_eq!(
            restarts,
            [
                "systemctl try-restart kube-apiserver.service",
                "readyz",
                "systemctl try-restart kube-scheduler.service",
                "readyz",
                "systemctl try-restart foothold-agent.service",
            ],
            "{calls}"
        );

        // An API server that does not answer within the bound: the rest restarted anyway (their certificates
        // are new), and the unit fails saying why.
        let (ok, calls) = kube_restart(" kube-apiserver.service kubelet.service\n", 0, 0);
        assert!(!ok, "{calls}");
        assert!(
            calls.contains("kube-restart: the API server did not answer /readyz within 0 s"),
            "{calls}"
        );
        assert!(
            calls.contains("systemctl try-restart kubelet.service\n"),
            "{calls}"
        );
    }
}
