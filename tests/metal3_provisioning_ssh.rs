//! SSH to the provisioned nodes of `metal3_provisioning.rs`, and the site SSH CA that vouches for their host keys.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use foothold_e2e::native_site::{wait_for, Site};
use foothold_e2e::netns::Namespace;
use foothold_e2e::{run, try_run};

/// `command` run on the node at `address` over SSH with `key`, from inside the namespace; its output. The ready
/// marker can come before sshd takes connections (seen: "Connection refused" right after it, once in four
/// runs), so a refused or failed login is tried again for up to five minutes (a loaded node took 50 s), naming
/// the last error.
pub(super) fn ssh(ns: &Namespace, key: &Path, address: &str, command: &str) -> String {
    wait_for(
        &format!("SSH to {address}"),
        Duration::from_secs(300),
        || {
            let out = try_run(
                ns.command("ssh")
                    .args(foothold_e2e::ssh_args(address, 22, key, command)),
            );
            (format!("{out:?}"), out.ok())
        },
    )
}

/// OpenSSH on the provisioning network with a known_hosts that trusts only the appliance's site SSH CA
/// (`@cert-authority`), strict: it logs in to the node at `address` (a host certificate from that CA for that
/// address); with a known_hosts trusting another CA it refuses the node.
pub(super) fn host_is_vouched_for_by_the_site_ssh_ca(
    ns: &Namespace,
    site: &Site,
    key: &Path,
    address: &str,
    dir: &Path,
) {
    let ca = std::fs::read_to_string(site.root.join("etc/foothold/ssh-ca/ca.pub")).unwrap();
    let other = dir.join("other-ssh-ca");
    if !other.exists() {
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&other));
    }
    let other_ca = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let login = |trusted: &str| {
        let known = dir.join("known_hosts");
        std::fs::write(
            &known,
            format!("@cert-authority {address} {}\n", trusted.trim()),
        )
        .unwrap();
        let mut ssh = ns.command("ssh");
        ssh.args(["-o", "StrictHostKeyChecking=yes", "-o"])
            .arg(format!("UserKnownHostsFile={}", known.display()))
            .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-i"])
            .arg(key)
            .arg(format!("foothold@{address}"))
            .arg("hostname");
        try_run(&mut ssh)
    };
    login(&ca).unwrap_or_else(|e| panic!("{address}: OpenSSH trusting only the site SSH CA: {e}"));
    let refused = login(&other_ca).expect_err("a node taken on another CA's word");
    assert!(
        refused.contains("Host key verification failed"),
        "{address}: {refused}"
    );
}
