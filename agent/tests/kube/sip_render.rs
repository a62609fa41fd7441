//! The SIP services' generated configuration, checked by the real programs that will read it: `haproxy -c` for
//! the load balancers, `ssh -G` for the jump host's ssh_config.

use crate::support;

use std::process::Command;

use foothold_agent::controllers::sip::configs::{
    haproxy_control_plane, haproxy_workers, ssh_config, Node,
};

fn nodes() -> Vec<Node> {
    (1..=5)
        .map(|i| Node {
            name: format!("rack{i}-node"),
            ip: if i % 2 == 0 {
                format!("fd00:10::{i}").parse().unwrap()
            } else {
                format!("10.23.25.{i}").parse().unwrap()
            },
        })
        .collect()
}

fn haproxy_check(config: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    Command::new("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(&path)
        .output()
        .expect("haproxy is installed by scripts/install-test-tools.sh")
}

#[test]
fn load_balancer_configs_pass_haproxy_check() {
    for (what, cfg) in [
        (
            "control plane",
            haproxy_control_plane(&nodes(), 30001, 6443),
        ),
        ("workers", haproxy_workers(&nodes(), 30100, 30110)),
        (
            "control plane without hosts",
            haproxy_control_plane(&[], 30001, 6443),
        ),
    ] {
        let out = haproxy_check(&cfg);
        assert!(
            out.status.success(),
            "haproxy -c refused the {what} config:\n{}{}\n{cfg}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The check can fail: a broken config is refused.
    let broken = haproxy_control_plane(&nodes(), 30001, 6443)
        .replace("balance roundrobin", "balance sideways");
    assert!(!haproxy_check(&broken).status.success());
}

#[test]
fn jump_host_ssh_config_parses_and_resolves_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ssh_config");
    std::fs::write(
        &path,
        ssh_config(&nodes(), "root", "/etc/foothold/ssh/id_rsa"),
    )
    .unwrap();
    for n in nodes() {
        let out = support::stdout(
            Command::new("ssh")
                .arg("-G")
                .arg("-F")
                .arg(&path)
                .arg(&n.name),
        );
        let get = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} ")))
                .unwrap_or_else(|| panic!("ssh -G printed no {k}:\n{out}"))
                .to_owned()
        };
        assert_eq!(get("hostname"), n.ip.to_string());
        assert_eq!(get("user"), "root");
        assert_eq!(get("identityfile"), "/etc/foothold/ssh/id_rsa");
        assert_eq!(get("stricthostkeychecking"), "false");
    }
}
