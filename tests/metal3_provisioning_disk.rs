//! What Metal3's config drive sets on the disk-installed nodes of `metal3_provisioning.rs`, and what a reboot
//! keeps: checked over SSH on the node (`node` runs a command there and returns its output).

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::native_site::{lease, Site, APPLIANCE};
use foothold_e2e::netns::Namespace;
use foothold_e2e::try_run;
use serde_json::{json, Value};

use super::nodes::Node;
use super::ssh::{host_is_vouched_for_by_the_site_ssh_ca, ssh};

/// The file the nodes' user data writes, and what it holds.
pub(super) const USER_DATA_FILE: &str = "/etc/foothold-test/user-data";
const USER_DATA_CONTENT: &str = "from the user data";

/// Where a node's read token goes (the node image's containerd-mirror and apt-source read it).
const READ_TOKEN: &str = "/etc/foothold/read-token";

/// The cloud-config lines that write [`USER_DATA_FILE`] and the node's read token `token` (appended to a node's
/// user data).
pub(super) fn write_files(token: &str) -> String {
    format!(
        "write_files:\n  - {{path: {USER_DATA_FILE}, content: \"{USER_DATA_CONTENT}\\n\"}}\n  \
         - {{path: {READ_TOKEN}, permissions: '0600', content: \"{token}\"}}\n"
    )
}

/// `foothold-agent credentials ARGS` on the site's agent; what it prints.
fn credentials(site: &Site, args: &[&str]) -> String {
    try_run(
        site.command("chroot")
            .arg(&site.root)
            .args(["foothold-agent", "credentials"])
            .args(args),
    )
    .unwrap_or_else(|e| panic!("foothold-agent credentials {args:?}: {e}"))
}

/// A new read credential `name` for the nodes, its token in the Secret `node-read-token` the installer Jobs give
/// the hosts they prepare (the agent's `--node-read-token-secret`); the token.
fn nodes_credential(site: &Site, name: &str) -> String {
    let token = credentials(site, &["add", name, "--scope", "read"])
        .trim()
        .to_owned();
    // URL-safe base64: nothing the user data's YAML string or a shell would need escaped.
    assert!(
        token.len() >= 32
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{token:?}"
    );
    site.kubectl_apply(
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "node-read-token", "namespace": "default"},
            "stringData": {"token": token},
        })
        .to_string(),
    );
    token
}

/// Reads need a credential on the site's agent from here on (its own containerd pulls with the appliance's,
/// `appliance`, made at its first boot); the nodes' is `nodes`, scope read, whose token this returns (in their
/// user data, and in the Secret the installer Jobs give hosts).
pub(super) fn reads_need_a_credential(site: &Site) -> String {
    let token = nodes_credential(site, "nodes");
    credentials(site, &["reads", "credential"]);
    token
}

/// The nodes' read token rotated: a new credential, `nodes-2`, in the installer Jobs' Secret, and `nodes` removed;
/// the new token, which the next installer Job writes to the hosts.
pub(super) fn rotate_the_nodes_read_token(site: &Site) -> String {
    let token = nodes_credential(site, "nodes-2");
    credentials(site, &["remove", "nodes"]);
    token
}

/// Each host (`on`: a command over SSH there) holds `token`, rotated by the installer: its token file, and the
/// Basic credentials containerd's mirror configuration sends.
pub(super) fn hold_the_rotated_token(token: &str, on: [&dyn Fn(&str) -> String; 2]) {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("node:{token}"));
    for host in on {
        let held = host(&format!(
            "printf '%s\\n' \"$(sudo cat {READ_TOKEN})\"; sudo grep -c 'Basic {basic}' \
             /etc/containerd/certs.d/registry.k8s.io/hosts.toml"
        ));
        assert_eq!(held, format!("{token}\n1\n"));
    }
}

/// From the provisioning network, the agent's apt source without a credential is refused and with the nodes'
/// answers.
fn reads_are_refused_without_a_credential(ns: &Namespace, site: &Site, token: &str) {
    let ca = site.root.join("etc/foothold/tls/ca.pem");
    let url = format!("https://{APPLIANCE}:5000/apt/foothold.sources");
    let code = |auth: Option<&str>| {
        let user = auth.map(|token| format!("node:{token}"));
        let mut args = vec!["--cacert", ca.to_str().unwrap(), &url];
        if let Some(user) = &user {
            args.extend(["-u", user]);
        }
        foothold_e2e::http_code_of(ns.command("curl"), &args)
    };
    assert_eq!(
        code(None),
        "401",
        "an anonymous read of the agent's apt source"
    );
    assert_eq!(
        code(Some(token)),
        "200",
        "the nodes' credential reading the apt source"
    );
}

/// A BareMetalHost's network data (OpenStack's `network_data.json`, as BMO hands it to Ironic's config drive):
/// `address`/24, static, on the NIC with `mac`. No route and no DNS server, as the appliance's DHCP gives none.
pub(super) fn network_data(mac: &str, address: &str) -> Value {
    json!({
        "links": [{"id": "provisioning", "type": "phy", "ethernet_mac_address": mac, "mtu": 1500}],
        "networks": [{"id": "provisioning-ipv4", "type": "ipv4", "link": "provisioning",
            "ip_address": address, "netmask": "255.255.255.0", "network_id": "provisioning"}],
        "services": [],
    })
}

/// The provisioned node `n` booted its installed system: named by the config drive, ready; at the address the
/// appliance's DHCP gave it, the one inspection recorded (`inspected`: where the BPA reaches it); logged in to
/// with the key of its user data (`key`), showing the host certificate of its user data; with what the rest of
/// the config drive set (`static_address`: from its network data). Returns its address.
pub(super) fn booted_from_disk(
    (ns, site, dir): (&Namespace, &Site, &Path),
    (key, token): (&Path, &str),
    n: &Node,
    inspected: &str,
    (static_address, started): (bool, Instant),
) -> String {
    let marker = foothold_e2e::wait_for_marker(&n.console, Duration::from_secs(900));
    assert!(
        marker.contains(&format!("host={} ", n.name)),
        "{} is not named as its BareMetalHost (the config drive): {marker}",
        n.name
    );
    foothold_e2e::say!(
        "metal3_provisioning: {} booted from disk and ready {} s after its image was set: {marker}",
        n.name,
        started.elapsed().as_secs()
    );
    let address = lease(&site.root, n.mac);
    assert_eq!(
        address, inspected,
        "{}: the installed OS's address is not the one in status.hardware",
        n.name
    );
    let out = ssh(
        ns,
        key,
        &address,
        "hostname; findmnt -no SOURCE /; cat /sys/devices/system/clocksource/clocksource0/current_clocksource",
    );
    assert!(out.starts_with(&format!("{}\n", n.name)), "{out}");
    assert!(
        out.contains("/dev/vda"),
        "{}'s root is not on its disk: {out}",
        n.name
    );
    // The domain's one socket (nodes.rs, domain_xml): the HPET instead makes every clock read of the control
    // plane a trip into qemu's device model.
    assert!(
        out.ends_with("tsc\n"),
        "{} keeps time with another clock than its TSC: {out}",
        n.name
    );
    // OpenSSH trusting only the site SSH CA for the node's address logs in, and refuses it trusting another CA.
    host_is_vouched_for_by_the_site_ssh_ca(ns, site, key, &address, dir);
    set_by_the_config_drive(
        &|command: &str| ssh(ns, key, &address, command),
        n.name,
        (n.mac, &address),
        static_address,
    );
    // It read the agent's apt index to be ready (its marker), where reads need a credential: with the token its
    // user data gave, which only root reads, in containerd's and apt's configuration.
    let modes = ssh(
        ns,
        key,
        &address,
        &format!(
            "sudo stat -c '%a %U %n' {READ_TOKEN} /etc/apt/auth.conf.d/foothold.conf \
             /etc/containerd/certs.d/registry.k8s.io/hosts.toml; \
             sudo grep -c '^  authorization = \"Basic ' /etc/containerd/certs.d/registry.k8s.io/hosts.toml"
        ),
    );
    assert_eq!(
        modes,
        format!(
            "600 root {READ_TOKEN}\n600 root /etc/apt/auth.conf.d/foothold.conf\n\
             600 root /etc/containerd/certs.d/registry.k8s.io/hosts.toml\n1\n"
        ),
        "{}",
        n.name
    );
    reads_are_refused_without_a_credential(ns, site, token);
    address
}

/// The node's IPv4 addresses on the NIC with `mac` (`ip -o` lines).
fn addresses_on(node: &dyn Fn(&str) -> String, mac: &str) -> String {
    node(&format!(
        "ip -4 -o addr show dev \"$(ip -o link | awk -F': ' 'tolower($0) ~ /{mac}/ {{print $2}}')\""
    ))
}

/// What the config drive Ironic wrote set on the node `name` at its first boot: its name resolves without DNS
/// (sudo looks it up on every call), the user data's file, cloud-init done from the config drive without
/// errors, the address at `address` on the NIC `mac` static (the network data's) or a DHCP lease, the root on
/// the disk and the data partition grown up to the config drive's partition.
fn set_by_the_config_drive(
    node: &dyn Fn(&str) -> String,
    name: &str,
    (mac, address): (&str, &str),
    static_address: bool,
) {
    let hosts = node(&format!("getent hosts {name}"));
    assert_eq!(
        hosts.split_whitespace().next(),
        Some("127.0.1.1"),
        "{name}: {hosts}"
    );
    assert_eq!(
        node(&format!("cat {USER_DATA_FILE}")),
        format!("{USER_DATA_CONTENT}\n"),
        "{name}: the user data's file"
    );
    // As root: `--wait` asks systemd, which only root reaches without D-Bus (none in the image).
    let status: Value =
        serde_json::from_str(&node("sudo cloud-init status --wait --format json || true"))
            .unwrap_or_else(|e| panic!("{name}: cloud-init status: {e}"));
    assert_eq!(status["status"], "done", "{name}: {status}");
    assert!(
        status["datasource"]
            .as_str()
            .is_some_and(|d| d.eq_ignore_ascii_case("configdrive")),
        "{name}: {status}"
    );
    assert_eq!(status["errors"], json!([]), "{name}: {status}");
    let addr = addresses_on(node, mac);
    assert!(
        addr.contains(&format!(" inet {address}/24 ")),
        "{name}: {addr}"
    );
    // A DHCP lease is `dynamic`; the network data's address is not.
    assert_eq!(addr.contains("dynamic"), !static_address, "{name}: {addr}");
    let blocks = node("lsblk -bnro NAME,SIZE,LABEL /dev/vda");
    let labelled = |label: &str| {
        blocks
            .lines()
            .find(|l| l.split(' ').nth(2) == Some(label))
            .and_then(|l| l.split(' ').nth(1)?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name}: no {label} on vda: {blocks}"))
    };
    assert!(labelled("config-2") > 0, "{name}: {blocks}");
    // The image's data partition is 16 MiB (the whole image 4 GiB); grown, it fills the disk up to the config
    // drive.
    assert!(labelled("foothold-data") > 4 << 30, "{name}: {blocks}");
}

/// After a reboot the node `name` is the same machine, from its disk: its name, its address on the NIC `mac`
/// (static, from its network data, or the same DHCP lease), the package its Software gave it (`package`: its
/// version, or `none`) and the binary, cloud-init's instance (the BareMetalHost's UID `uid`, so cloud-init did
/// not take it for a new machine), containerd's store on the disk's root file system.
pub(super) fn the_same_after_a_reboot(
    node: &dyn Fn(&str) -> String,
    (name, package): (&str, &str),
    (mac, address, static_address): (&str, &str, bool),
    uid: &str,
) {
    let after = node(
        "hostname; dpkg-query -W -f '${Version}\\n' hello-foothold 2>/dev/null || echo none; hello-tool; \
         cloud-init query instance-id; findmnt -no FSTYPE --target /var/lib/containerd",
    );
    assert_eq!(
        after,
        format!("{name}\n{package}\nhello-tool 1\n{uid}\next4\n"),
        "{name} after its reboot"
    );
    let addr = addresses_on(node, mac);
    assert!(
        addr.contains(&format!(" inet {address}/24 ")),
        "{name} after its reboot: {addr}"
    );
    assert_eq!(
        addr.contains("dynamic"),
        !static_address,
        "{name} after its reboot: {addr}"
    );
}
