//! Kubernetes' certificates renewed before they end (`foothold-kube-pki-renew`), on the appliance's root before
//! `metal3_provisioning.rs` starts its site: the first boot's set (`foothold-kube-pki`) is kept while most of its
//! year is left; when a renewal is due (here: asked for 400 days ahead of the end, which a one-year certificate
//! always is) every kubeadm certificate but the CAs and every kubeconfig's client certificate is made again from
//! the same CAs, and so is the sudo user's own kubeconfig (in their name, in kubeadm's cluster-admins group), the
//! agent's and BMO's (each in a name of its own). The site then runs on the renewed set: etcd, the API server,
//! the agent's controllers and BMO (every later phase of the test), each of the last two with its own kubeconfig
//! and ClusterRole.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Command;

use foothold_e2e::run;

/// `script` of the appliance run in its root, as its unit would at boot: in a mount namespace of its own with
/// the host's devices and an empty /run.
fn in_root(root: &Path, env: &[&str], script: &str) -> String {
    run(Command::new("unshare")
        .args(["--mount", "--fork", "sh", "-c"])
        .arg(
            "mount --make-rprivate / && mount --rbind /dev \"$0/dev\" && mount -t tmpfs tmpfs \"$0/run\" \
             && exec chroot \"$0\" env \"$@\"",
        )
        .arg(root)
        .args(env)
        .arg(script))
}

fn read(root: &Path, path: &str) -> Vec<u8> {
    std::fs::read(root.join(path.trim_start_matches('/')))
        .unwrap_or_else(|e| panic!("{path} in the appliance's root: {e}"))
}

const RENEWED: &[&str] = &[
    "/etc/kubernetes/pki/apiserver.crt",
    "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
    "/etc/kubernetes/pki/apiserver-etcd-client.crt",
    "/etc/kubernetes/pki/front-proxy-client.crt",
    "/etc/kubernetes/pki/etcd/server.crt",
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/kube-proxy.conf",
    "/etc/kubernetes/foothold-agent.conf",
    "/etc/kubernetes/baremetal-operator.conf",
];

const KEPT: &[&str] = &[
    "/etc/kubernetes/pki/ca.crt",
    "/etc/kubernetes/pki/etcd/ca.crt",
    "/etc/kubernetes/pki/front-proxy-ca.crt",
    "/etc/kubernetes/pki/sa.pub",
];

/// The subject of a kubeconfig's client certificate, as OpenSSL prints it in RFC 2253's order.
fn client_subject(kubeconfig: &Path) -> String {
    use base64::Engine as _;
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let data = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
        .unwrap_or_else(|| panic!("no client certificate in {}", kubeconfig.display()));
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let file = kubeconfig.with_extension("test-cert");
    std::fs::write(&file, pem).unwrap();
    let subject = run(Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(&file));
    std::fs::remove_file(&file).unwrap();
    subject
}

/// Kubernetes' first-boot certificates kept while fresh and renewed when due; returns the sudo user's name.
pub(super) fn kubernetes_certificates_renew(root: &Path) -> String {
    in_root(root, &[], "/usr/local/lib/foothold/kube-pki");
    let user_config = std::fs::read_dir(root.join("home"))
        .unwrap()
        .map(|e| e.unwrap().path().join(".kube/config"))
        .find(|p| p.exists())
        .expect("a sudo user's kubeconfig");
    // The sudo user's own kubeconfig: in their name, in kubeadm's cluster-admins, not admin.conf.
    assert_ne!(
        std::fs::read(&user_config).unwrap(),
        read(root, "/etc/kubernetes/admin.conf")
    );
    let user = user_config
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        client_subject(&user_config),
        format!("subject=CN={user},O=kubeadm:cluster-admins\n")
    );
    let user_before = std::fs::read(&user_config).unwrap();
    // The agent and BMO each in a name of its own, in no group: RBAC gives them their ClusterRoles only.
    for (conf, name) in [
        ("foothold-agent.conf", "foothold:agent"),
        ("baremetal-operator.conf", "foothold:baremetal-operator"),
    ] {
        assert_eq!(
            client_subject(&root.join("etc/kubernetes").join(conf)),
            format!("subject=CN={name}\n"),
            "{conf}"
        );
    }

    // A fresh year: kept.
    let before: Vec<Vec<u8>> = RENEWED.iter().chain(KEPT).map(|p| read(root, p)).collect();
    let kept = in_root(root, &[], "/usr/local/lib/foothold/kube-pki-renew");
    assert!(
        kept.contains("kube-pki-renew: kept: /etc/kubernetes/pki/apiserver.crt ends"),
        "{kept}"
    );
    let unchanged: Vec<Vec<u8>> = RENEWED.iter().chain(KEPT).map(|p| read(root, p)).collect();
    assert!(before == unchanged, "nothing renewed: {kept}");

    // Due: renewed from the same CAs.
    let renewed = in_root(
        root,
        &["FOOTHOLD_KUBE_RENEW_DAYS=400"],
        "/usr/local/lib/foothold/kube-pki-renew",
    );
    assert!(
        renewed.contains("kube-pki-renew: renewed; now ends"),
        "{renewed}"
    );
    for (path, old) in RENEWED.iter().zip(&before) {
        assert_ne!(&read(root, path), old, "{path} renewed:\n{renewed}");
    }
    for (path, old) in KEPT.iter().zip(&before[RENEWED.len()..]) {
        assert_eq!(&read(root, path), old, "{path} kept:\n{renewed}");
    }
    let pki = root.join("etc/kubernetes/pki");
    let verified = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(pki.join("ca.crt"))
        .arg(pki.join("apiserver.crt")));
    assert!(verified.ends_with(": OK\n"), "{verified}");
    assert_ne!(
        std::fs::read(&user_config).unwrap(),
        user_before,
        "the sudo user's kubeconfig renewed:\n{renewed}"
    );
    assert_eq!(
        client_subject(&user_config),
        format!("subject=CN={user},O=kubeadm:cluster-admins\n")
    );
    // etcd (its own user) still reads its key; nothing half-made is left.
    let etcd_uid = String::from_utf8(read(root, "/etc/passwd"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("etcd:x:")?
                .split(':')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .expect("etcd's user");
    assert_eq!(
        std::fs::metadata(pki.join("etcd/server.key"))
            .unwrap()
            .uid(),
        etcd_uid
    );
    // The agent, its own user, reads the certificates it reports in /metrics (the CA's, the API server's); the
    // keys only their owner.
    for (file, mode) in [
        ("ca.crt", 0o644),
        ("apiserver.crt", 0o644),
        ("etcd/server.crt", 0o644),
        ("ca.key", 0o600),
        ("apiserver.key", 0o600),
        ("etcd/server.key", 0o600),
    ] {
        let got = std::fs::metadata(pki.join(file)).unwrap().mode() & 0o777;
        assert_eq!(got, mode, "{file}: {got:o}, not {mode:o}");
    }
    for old in ["kube-proxy.conf.old", "kubelet.conf.old"] {
        assert!(
            !root.join("etc/kubernetes").join(old).exists(),
            "{old} left"
        );
    }
    assert!(!user_config.with_extension("old").exists());
    user
}

/// Secrets are in etcd encrypted (secretbox, with the key `foothold-kube-pki` made at the first boot): the
/// Secret `namespace/name`, read from etcd itself over its v3 JSON gateway with the API server's etcd client
/// certificate, is the provider's envelope with `clear` nowhere in it; through the API it reads as written.
pub(super) fn secrets_are_encrypted_in_etcd(
    site: &foothold_e2e::native_site::Site,
    namespace: &str,
    name: &str,
    clear: &str,
) {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let pki = site.root.join("etc/kubernetes/pki");
    let key = b64.encode(format!("/registry/secrets/{namespace}/{name}"));
    let body = run(site
        .command("curl")
        .args(["-fsS", "--max-time", "30", "--cacert"])
        .arg(pki.join("etcd/ca.crt"))
        .arg("--cert")
        .arg(pki.join("apiserver-etcd-client.crt"))
        .arg("--key")
        .arg(pki.join("apiserver-etcd-client.key"))
        .arg("https://127.0.0.1:2379/v3/kv/range")
        .args(["-d", &format!("{{\"key\": \"{key}\"}}")]));
    let range: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stored = b64
        .decode(
            range["kvs"][0]["value"]
                .as_str()
                .unwrap_or_else(|| panic!("no {namespace}/{name} in etcd: {body}")),
        )
        .unwrap();
    assert!(
        stored.starts_with(b"k8s:enc:secretbox:v1:foothold-1:"),
        "{namespace}/{name} in etcd is not secretbox's envelope: {:?}",
        String::from_utf8_lossy(&stored[..stored.len().min(80)])
    );
    assert!(
        !stored.windows(clear.len()).any(|w| w == clear.as_bytes()),
        "{namespace}/{name}'s value is in etcd in clear"
    );
    let through_api = site
        .kubectl(&[
            "get",
            "secret",
            "-n",
            namespace,
            name,
            "-o",
            "jsonpath={.data.password}",
        ])
        .unwrap();
    assert_eq!(b64.decode(through_api.trim()).unwrap(), clear.as_bytes());
}

/// Ironic's API asks for the credentials foothold-metal3-auth made (BMO's, in the appliance's root `root`): none,
/// or a wrong password of the right length, is 401; BMO's are let in. HTTPS verified with the site CA.
pub(super) fn ironic_asks_for_bmos_credentials(
    site: &foothold_e2e::native_site::Site,
    root: &Path,
) {
    let site_ca = root.join("etc/foothold/tls/ca.pem");
    let ironic_status = |user: Option<(&str, &str)>| {
        let mut curl = site.command("curl");
        curl.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(&site_ca);
        if let Some((name, password)) = user {
            curl.args(["-u", &format!("{name}:{password}")]);
        }
        let appliance = foothold_e2e::native_site::APPLIANCE;
        run(curl.arg(format!("https://{appliance}:6385/v1/nodes")))
    };
    let auth = root.join("etc/metal3/auth/ironic");
    let bmo_user = std::fs::read_to_string(auth.join("username")).unwrap();
    let bmo_password = std::fs::read_to_string(auth.join("password")).unwrap();
    let wrong: String = bmo_password
        .chars()
        .map(|c| if c == 'a' { 'b' } else { 'a' })
        .collect();
    assert_eq!(ironic_status(None), "401");
    assert_eq!(ironic_status(Some((&bmo_user, &wrong))), "401");
    assert_eq!(ironic_status(Some((&bmo_user, &bmo_password))), "200");
}

/// The agent and BMO run with kubeconfigs of their own (the rest of the run — BMO provisioning the hosts, the
/// BPA making its Job — shows their ClusterRoles suffice), each as its own user (their units' `User=`: the
/// files they read are their own or their group's, the agent's data directory its own), and RBAC keeps them to
/// their rules: a `kubectl auth can-i` table, asked as each of them.
pub(super) fn own_kubeconfigs(site: &foothold_e2e::native_site::Site, root: &Path) {
    // Users by the appliance's own /etc/passwd: this host has no such users, so `ps` shows their numbers.
    let passwd = String::from_utf8(read(root, "/etc/passwd")).unwrap();
    let uid = |user: &str| {
        passwd
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.first() == Some(&user)).then(|| f[2].to_owned())
            })
            .unwrap_or_else(|| panic!("no user {user} in the appliance's /etc/passwd"))
    };
    let units = site
        .command("ps")
        .args(["-eo", "uid,args"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap();
    // The agent's unit names its flags' file (`serve --config`); BMO's its kubeconfig on the command line.
    let agent_yaml = String::from_utf8(read(root, "/etc/foothold/agent.yaml")).unwrap();
    let in_agent_yaml = |key: &str| {
        agent_yaml.lines().find_map(|l| {
            let value = l.strip_prefix(key)?.strip_prefix(':')?.trim();
            Some(serde_json::from_str::<String>(value).unwrap_or_else(|e| {
                panic!("{key} in /etc/foothold/agent.yaml is not one quoted string ({e}): {l}")
            }))
        })
    };
    assert_eq!(
        in_agent_yaml("kubeconfig").as_deref(),
        Some("/etc/kubernetes/foothold-agent.conf"),
        "the agent's kubeconfig in /etc/foothold/agent.yaml:\n{agent_yaml}"
    );
    for (user, program, conf) in [
        (
            "foothold-agent",
            "foothold-agent serve",
            "--config /etc/foothold/agent.yaml",
        ),
        (
            "baremetal-operator",
            "/usr/local/bin/baremetal-operator ",
            "/etc/kubernetes/baremetal-operator.conf",
        ),
    ] {
        let uid = uid(user);
        assert_ne!(uid, "0", "{user}");
        assert!(
            units
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&uid)
                    && l.contains(program)
                    && l.contains(conf)
                    && !l.contains("admin.conf")),
            "{program} does not run as {user} (uid {uid}) with {conf}:\n{units}"
        );
    }
    let table: &[(&str, &str, &str, bool)] = &[
        (
            "foothold:baremetal-operator",
            "update",
            "baremetalhosts.metal3.io/status",
            true,
        ),
        ("foothold:baremetal-operator", "get", "secrets", true),
        ("foothold:baremetal-operator", "create", "jobs.batch", false),
        ("foothold:baremetal-operator", "create", "pods", false),
        (
            "foothold:baremetal-operator",
            "create",
            "clusterrolebindings",
            false,
        ),
        (
            "foothold:baremetal-operator",
            "patch",
            "provisionings.bpa.akraino.org",
            false,
        ),
        ("foothold:agent", "create", "jobs.batch", true),
        (
            "foothold:agent",
            "patch",
            "provisionings.bpa.akraino.org/status",
            true,
        ),
        (
            "foothold:agent",
            "update",
            "baremetalhosts.metal3.io/status",
            false,
        ),
        ("foothold:agent", "create", "pods", false),
        ("foothold:agent", "create", "clusterrolebindings", false),
        ("foothold:agent", "delete", "nodes", false),
    ];
    let mut wrong = Vec::new();
    for &(user, verb, resource, want) in table {
        // `resource/x` is kubectl's way to name an object; a subresource is a flag of its own.
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        let got = match site.kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            &format!("--subresource={sub}"),
            "-n",
            "default",
            "--as",
            user,
        ]) {
            Ok(out) => out.trim() == "yes",
            Err(out) if out.trim_start().starts_with("no") => false,
            Err(e) => panic!("kubectl auth can-i {verb} {resource} {sub} --as {user}: {e}"),
        };
        if got != want {
            wrong.push(format!(
                "{user} {verb} {resource} {sub}: {got}, want {want}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC on the appliance:\n{}",
        wrong.join("\n")
    );
}
