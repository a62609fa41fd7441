//! The installer's SSH transport against a real OpenSSH sshd (Debian's, started by the test on 127.0.0.1 with
//! its own configuration, host key and authorized keys; as root): commands with stdin, output and exit status,
//! binary-safe; a timeout naming the host and command; a refused key, a closed port and a host key that changes
//! during a run each named; hosts held to the site SSH CA's host certificates.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use foothold_agent::installer::ssh::{load_key, Connection, KnownHosts, SshError, Target};
use support::{free_port, run, tool, wait_for};

/// An sshd on 127.0.0.1 that lets root in with the keys in `authorized`; killed on drop.
struct Sshd {
    child: Child,
    port: u16,
}

impl Sshd {
    fn start(dir: &Path, port: u16, host_key: &Path, authorized: &Path) -> Sshd {
        Sshd::start_certified(dir, port, host_key, None, authorized)
    }

    /// [`Sshd::start`] showing `certificate` (sshd's HostCertificate) for its host key.
    fn start_certified(
        dir: &Path,
        port: u16,
        host_key: &Path,
        certificate: Option<&Path>,
        authorized: &Path,
    ) -> Sshd {
        std::fs::create_dir_all("/run/sshd").unwrap();
        let config = dir.join(format!("sshd_config-{port}"));
        let certificate = certificate
            .map(|c| format!("HostCertificate {}\n", c.display()))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\n{certificate}AuthorizedKeysFile {}\n\
                 PidFile none\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel VERBOSE\n",
                host_key.display(),
                authorized.display()
            ),
        )
        .unwrap();
        // Debian's sshd is in /usr/sbin, which not every PATH has.
        let sshd = Path::new("/usr/sbin/sshd");
        let sshd = if sshd.is_file() {
            sshd.to_owned()
        } else {
            tool("sshd")
        };
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("sshd-{port}.log"))).unwrap())
            .spawn()
            .unwrap();
        wait_for("sshd listening", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Sshd { child, port }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path, kind: &str) -> PathBuf {
    run(Command::new(tool("ssh-keygen"))
        .args(["-q", "-t", kind, "-N", "", "-C", "foothold-test", "-f"])
        .arg(path));
    path.to_owned()
}

/// In `dir`: a key whose public half is the only entry of `authorized_keys`, and a stranger's key. The key,
/// the stranger's and the authorized_keys file.
fn key_and_stranger(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let key = keygen(&dir.join("id_ed25519"), "ed25519");
    let stranger = keygen(&dir.join("stranger"), "ed25519");
    let authorized = dir.join("authorized_keys");
    std::fs::copy(key.with_extension("pub"), &authorized).unwrap();
    (key, stranger, authorized)
}

fn target(port: u16) -> Target {
    Target {
        name: "node-0".into(),
        address: "127.0.0.1".into(),
        port,
        user: "root".into(),
    }
}

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_over_ssh_with_their_stdin_output_and_status() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let host_key = keygen(&dir.join("host"), "ed25519");
    let (ed, rsa) = (
        keygen(&dir.join("id_ed25519"), "ed25519"),
        keygen(&dir.join("id_rsa"), "rsa"),
    );
    let authorized = dir.join("authorized_keys");
    let keys = [&ed, &rsa]
        .map(|k| std::fs::read_to_string(k.with_extension("pub")).unwrap())
        .concat();
    std::fs::write(&authorized, keys).unwrap();
    let sshd = Sshd::start(dir, free_port(), &host_key, &authorized);
    let known = KnownHosts::default();

    let c = Connection::open(&target(sshd.port), load_key(&ed).unwrap(), &known, T)
        .await
        .unwrap();
    let out = c
        .run("echo out; echo err >&2; exit 3", b"", T)
        .await
        .unwrap();
    assert_eq!(
        (out.status, &out.stdout[..], &out.stderr[..]),
        (Some(3), &b"out\n"[..], &b"err\n"[..])
    );
    assert!(!out.success());
    assert_eq!(out.tail(5), "err");
    // stdin arrives whole and binary-safe (how the installer writes files), on the same connection.
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let out = c.run("cat", &data, T).await.unwrap();
    assert!(out.success());
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "cat returned other bytes");
    // The host key seen is the one the host has.
    let fingerprint = run(Command::new(tool("ssh-keygen"))
        .args(["-l", "-E", "sha256", "-f"])
        .arg(host_key.with_extension("pub")))
    .stdout;
    let fingerprint = String::from_utf8(fingerprint).unwrap();
    assert!(
        fingerprint.contains(&known.fingerprint("127.0.0.1", sshd.port).unwrap()),
        "{fingerprint}"
    );
    // A command that outlives its timeout is named with the host.
    let err = c
        .run("sleep 30", b"", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, SshError::TimedOut { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "node-0 (127.0.0.1): \"sleep 30\" did not finish within 1s"
    );
    c.close().await;

    // Another host behind the same address (another forward's port) has its own key: not a changed one.
    let other = Sshd::start(
        dir,
        free_port(),
        &keygen(&dir.join("host-2"), "ed25519"),
        &authorized,
    );
    let c2 = Connection::open(&target(other.port), load_key(&ed).unwrap(), &known, T)
        .await
        .unwrap();
    assert!(c2.run("true", b"", T).await.unwrap().success());
    c2.close().await;
    assert_ne!(
        known.fingerprint("127.0.0.1", other.port),
        known.fingerprint("127.0.0.1", sshd.port)
    );

    // ICN's key Secret holds an RSA key: it logs in too (rsa-sha2 signatures).
    let c = Connection::open(&target(sshd.port), load_key(&rsa).unwrap(), &known, T)
        .await
        .unwrap();
    assert_eq!(c.run("id -u", b"", T).await.unwrap().stdout, b"0\n");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_a_closed_port_and_a_changed_host_key_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (key, stranger, authorized) = key_and_stranger(dir);
    let port = free_port();
    let known = KnownHosts::default();
    {
        let sshd = Sshd::start(
            dir,
            port,
            &keygen(&dir.join("host-a"), "ed25519"),
            &authorized,
        );
        let err =
            match Connection::open(&target(sshd.port), load_key(&stranger).unwrap(), &known, T)
                .await
            {
                Err(e) => e,
                Ok(_) => panic!("a key not in authorized_keys logged in"),
            };
        assert_eq!(
            err.to_string(),
            "node-0 (127.0.0.1): the SSH key in the Secret was refused for user root"
        );
        assert!(err.lasting(), "a refused key is refused again");
        let c = Connection::open(&target(sshd.port), load_key(&key).unwrap(), &known, T)
            .await
            .unwrap();
        c.close().await;
    }
    // The same address with another host key later in the run: refused before any command.
    let _sshd = Sshd::start(
        dir,
        port,
        &keygen(&dir.join("host-b"), "ed25519"),
        &authorized,
    );
    let err = match Connection::open(&target(port), load_key(&key).unwrap(), &known, T).await {
        Err(e) => e,
        Ok(_) => panic!("a changed host key was accepted"),
    };
    assert!(matches!(err, SshError::HostKeyChanged { .. }), "{err}");
    assert!(err.lasting());
    let text = err.to_string();
    assert!(
        text.starts_with(
            "node-0 (127.0.0.1): the SSH host key changed during the run (was SHA256:"
        ) && text.ends_with("): refusing to go on"),
        "{text}"
    );

    // Nothing listening.
    let closed = free_port();
    let err = match Connection::open(&target(closed), load_key(&key).unwrap(), &known, T).await {
        Err(e) => e,
        Ok(_) => panic!("connected to a closed port"),
    };
    assert!(matches!(err, SshError::Connect { .. }), "{err}");
    assert!(!err.lasting(), "a host not answering may answer later");
    assert!(
        err.to_string()
            .starts_with("node-0 (127.0.0.1): cannot connect over SSH: "),
        "{err}"
    );
}

/// The SHA-256 fingerprint of the public key in `path`, as OpenSSH prints it.
fn fingerprint(path: &Path) -> String {
    let out = run(Command::new(tool("ssh-keygen"))
        .args(["-l", "-E", "sha256", "-f"])
        .arg(path))
    .stdout;
    let out = String::from_utf8(out).unwrap();
    out.split_whitespace().nth(1).unwrap().to_owned()
}

/// `foothold-agent` with `args`: its standard output (it must succeed).
fn agent(args: &[&std::ffi::OsStr]) -> String {
    String::from_utf8(run(Command::new(support::agent_bin()).args(args)).stdout).unwrap()
}

/// The site SSH CA as the appliance makes it (`foothold-agent ssh-ca`); hosts certified by it as an operator
/// does (`ssh-host-key`: a new key as cloud-config for a node's user data, or the certificate of a key a host
/// has). Held to it (the BPA's Jobs get its public key as SSH_HOST_CA), the installer takes a host whose sshd
/// shows such a certificate for its inventory name or address, and refuses, before any command and naming the
/// host and its key's fingerprint, one that shows a plain key, another CA's certificate or a certificate for
/// other names; `install-cluster` says so and exits 3 (lasting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_are_held_to_the_site_ssh_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (key, _, authorized) = key_and_stranger(dir);
    let ca_dir = dir.join("ssh-ca");
    let said = agent(&["ssh-ca".as_ref(), "--dir".as_ref(), ca_dir.as_ref()]);
    let ca_pub = std::fs::read_to_string(ca_dir.join("ca.pub")).unwrap();
    assert_eq!(said, ca_pub);
    let ca = foothold_agent::ssh_ca::HostCa::parse(&ca_pub).unwrap();
    assert_eq!(ca.fingerprint(), fingerprint(&ca_dir.join("ca.pub")));
    let other_ca = dir.join("other-ca");
    agent(&["ssh-ca".as_ref(), "--dir".as_ref(), other_ca.as_ref()]);

    // A node given a new key and its certificate as cloud-config (what cloud-init writes on the node).
    let config = agent(&[
        "ssh-host-key".as_ref(),
        "--ca-dir".as_ref(),
        ca_dir.as_ref(),
        "--principal".as_ref(),
        "node-0".as_ref(),
        "--principal".as_ref(),
        "127.0.0.1".as_ref(),
    ]);
    let doc: serde_json::Value = serde_saphyr::from_str(&config).unwrap();
    let keys = &doc["ssh_keys"];
    let host_key = dir.join("vouched");
    std::fs::write(&host_key, keys["ed25519_private"].as_str().unwrap()).unwrap();
    std::fs::set_permissions(
        &host_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(
        host_key.with_extension("pub"),
        keys["ed25519_public"].as_str().unwrap(),
    )
    .unwrap();
    let cert = dir.join("vouched-cert.pub");
    std::fs::write(&cert, keys["ed25519_certificate"].as_str().unwrap()).unwrap();
    let listed = String::from_utf8(
        run(Command::new(tool("ssh-keygen"))
            .arg("-L")
            .arg("-f")
            .arg(&cert))
        .stdout,
    )
    .unwrap();
    assert!(
        listed.contains("ssh-ed25519-cert-v01@openssh.com host certificate")
            && listed.contains(&format!("Signing CA: ED25519 {}", ca.fingerprint())),
        "{listed}"
    );
    let vouched = Sshd::start_certified(dir, free_port(), &host_key, Some(&cert), &authorized);
    let known = KnownHosts::vouched_by(ca.clone());
    let c = Connection::open(&target(vouched.port), load_key(&key).unwrap(), &known, T)
        .await
        .unwrap();
    assert!(c.run("true", b"", T).await.unwrap().success());
    c.close().await;
    assert_eq!(
        known.fingerprint("127.0.0.1", vouched.port).unwrap(),
        fingerprint(&host_key.with_extension("pub"))
    );

    // Hosts with keys of their own: one certified by the site CA for another name, one by another CA, one not.
    let certify = |name: &str, ca: &Path, principal: &str| {
        let key = keygen(&dir.join(name), "ed25519");
        let pub_key = key.with_extension("pub");
        let cert = agent(&[
            "ssh-host-key".as_ref(),
            "--ca-dir".as_ref(),
            ca.as_ref(),
            "--principal".as_ref(),
            principal.as_ref(),
            "--public-key".as_ref(),
            pub_key.as_ref(),
        ]);
        let path = dir.join(format!("{name}-cert.pub"));
        std::fs::write(&path, cert).unwrap();
        (key, Some(path))
    };
    let cases = [
        (
            "elsewhere",
            certify("elsewhere", &ca_dir, "node-9"),
            "its certificate is for [\"node-9\"], not for node-0 or 127.0.0.1".to_owned(),
        ),
        (
            "forged",
            certify("forged", &other_ca, "127.0.0.1"),
            format!(
                "its certificate is signed by {}, not by the site SSH CA",
                fingerprint(&other_ca.join("ca.pub"))
            ),
        ),
        (
            "plain",
            (keygen(&dir.join("plain"), "ed25519"), None),
            format!(
                "it showed a plain host key, no certificate (the site SSH CA is {})",
                ca.fingerprint()
            ),
        ),
    ];
    for (name, (host_key, cert), why) in cases {
        let sshd = Sshd::start_certified(dir, free_port(), &host_key, cert.as_deref(), &authorized);
        let err =
            match Connection::open(&target(sshd.port), load_key(&key).unwrap(), &known, T).await {
                Err(e) => e,
                Ok(_) => panic!("{name}: a host the site SSH CA did not vouch for was taken"),
            };
        assert!(matches!(err, SshError::Unvouched { .. }), "{name}: {err}");
        assert!(err.lasting());
        assert_eq!(
            err.to_string(),
            format!(
                "node-0 (127.0.0.1): the SSH host key {} is not vouched for by the site SSH CA: {why}; refusing to connect",
                fingerprint(&host_key.with_extension("pub"))
            ),
            "{name}"
        );
        assert_eq!(known.fingerprint("127.0.0.1", sshd.port), None, "{name}");
        if name == "plain" {
            // The installer as a BPA Job runs it, with SSH_HOST_CA: lasting, the host and key named.
            let (code, said) = install_cluster_with(dir, sshd.port, &key, "c1", Some(&ca_pub));
            assert_eq!(code, Some(3), "{said}");
            assert!(
                said.contains(&format!(
                    "FAILED: master-0 (127.0.0.1): connect: master-0 (127.0.0.1): the SSH host key {} is not vouched for by the site SSH CA: it showed a plain host key",
                    fingerprint(&host_key.with_extension("pub"))
                )),
                "{said}"
            );
        }
    }
}

/// `foothold-agent install-cluster` on one host, `master-0` at 127.0.0.1:`port`, as root with `key`: its exit
/// status and standard output.
fn install_cluster(dir: &Path, port: u16, key: &Path, cluster: &str) -> (Option<i32>, String) {
    install_cluster_with(dir, port, key, cluster, None)
}

/// [`install_cluster`] with `SSH_HOST_CA` set to `ca`, as the BPA's Jobs have it.
fn install_cluster_with(
    dir: &Path,
    port: u16,
    key: &Path,
    cluster: &str,
    ca: Option<&str>,
) -> (Option<i32>, String) {
    let inventory = dir.join(format!("hosts-{port}.ini"));
    std::fs::write(
        &inventory,
        format!(
            "[all]\nmaster-0 ansible_host=127.0.0.1 ansible_port={port}\n\
             [kube_control_plane]\nmaster-0\n[kube_node]\nmaster-0\n"
        ),
    )
    .unwrap();
    let binaries: Vec<_> = ["kubeadm", "kubelet", "kubectl", "kube-proxy"]
        .iter()
        .map(|n| serde_json::json!({"name": n, "url": format!("http://127.0.0.1:9/{n}"), "sha256": "ab".repeat(32)}))
        .collect();
    let release = dir.join("release.json");
    let image = |name: &str| format!("registry.k8s.io/{name}@sha256:{}", "cd".repeat(32));
    let text = serde_json::json!({
        "version": "v1.35.4",
        "sandboxImage": image("pause:3.10.1"),
        "images": {
            "kube-apiserver": image("kube-apiserver:v1.35.4"),
            "kube-controller-manager": image("kube-controller-manager:v1.35.4"),
            "kube-scheduler": image("kube-scheduler:v1.35.4"),
            "etcd": image("etcd:3.6.6-0"),
            "coredns": image("coredns/coredns:v1.13.1"),
        },
        "binaries": binaries,
    });
    std::fs::write(&release, text.to_string()).unwrap();
    let mut command = Command::new(support::agent_bin());
    command.env_remove("SSH_HOST_CA");
    if let Some(ca) = ca {
        command.env("SSH_HOST_CA", ca);
    }
    let out = command
        .arg("install-cluster")
        .arg("--inventory")
        .arg(&inventory)
        .arg("--release")
        .arg(&release)
        .arg("--ssh-key")
        .arg(key)
        .args(["--cluster", cluster, "--kubeconfig-out"])
        .arg(dir.join("kubeconfig"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The BPA's Jobs retry an installer that exits 1 and give up at once on one that exits 3 (their pod failure
/// policy): a refused key, a refused plan and unusable inputs are lasting, a host that does not answer is not.
#[test]
fn install_cluster_exits_3_when_another_run_cannot_help_and_1_when_it_may() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (key, stranger, authorized) = key_and_stranger(dir);
    let sshd = Sshd::start(
        dir,
        free_port(),
        &keygen(&dir.join("host"), "ed25519"),
        &authorized,
    );

    let (code, said) = install_cluster(dir, sshd.port, &stranger, "c1");
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains(
            "FAILED: master-0 (127.0.0.1): connect: master-0 (127.0.0.1): the SSH key in the Secret was refused for user root"
        ),
        "{said}"
    );
    let (code, said) = install_cluster(dir, sshd.port, &key, "C_1");
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains("FAILED: inventory: plan: CLUSTER_NAME \"C_1\""),
        "{said}"
    );
    // Inputs it cannot use: an inventory that is not there; for install-software, a packages manifest.
    let missing = dir.join("missing.ini");
    let refuses_missing = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(support::agent_bin())
            .args(args)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{said}");
        assert!(
            said.starts_with(&format!("FAILED: reading {}: ", missing.display())),
            "{said}"
        );
    };
    let inventory = dir.join(format!("hosts-{}.ini", sshd.port));
    refuses_missing(&[
        "install-cluster".as_ref(),
        "--inventory".as_ref(),
        missing.as_ref(),
        "--cluster".as_ref(),
        "c1".as_ref(),
    ]);
    refuses_missing(&[
        "install-software".as_ref(),
        "--inventory".as_ref(),
        inventory.as_ref(),
        "--ssh-key".as_ref(),
        key.as_ref(),
        "--packages".as_ref(),
        missing.as_ref(),
    ]);
    let (code, said) = install_cluster(dir, free_port(), &key, "c1");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: master-0 (127.0.0.1): connect: master-0 (127.0.0.1): cannot connect over SSH: "),
        "{said}"
    );
}

#[test]
fn a_key_file_that_is_not_a_key_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("id_rsa");
    std::fs::write(&path, "not a key\n").unwrap();
    let err = load_key(&path).unwrap_err();
    assert!(
        err.starts_with(&format!(
            "{}: not an unencrypted OpenSSH private key: ",
            path.display()
        )),
        "{err}"
    );
    let missing = tmp.path().join("missing");
    assert!(load_key(&missing)
        .unwrap_err()
        .starts_with(&format!("{}: ", missing.display())));
}
