//! The SIP services' text configurations, pure: host addresses from a BareMetalHost's networkData and BMC address, the
//! HAProxy configuration of the load balancers, and the jump host's `ssh_config`. Tests run the real `haproxy
//! -c` and `ssh -G` on the output.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::controllers::common::document::json_or_yaml;

/// A host as the services see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub ip: IpAddr,
}

/// Parses a networkData document (OpenStack network_data, JSON or YAML) far enough to know it has a
/// `networks` list.
pub fn parse_network_data(text: &str) -> Result<serde_json::Value, String> {
    let doc: serde_json::Value =
        json_or_yaml(text).map_err(|e| format!("networkData is neither JSON nor YAML: {e}"))?;
    if !doc.get("networks").is_some_and(|n| n.is_array()) {
        return Err("networkData has no networks list".into());
    }
    Ok(doc)
}

/// The address of interface `id` in a networkData document: `networks[].ip_address` where
/// `networks[].id == id`, or the first network with an address when `id` is None. IPv4 or IPv6; a prefix
/// length (`/24`) is dropped.
pub fn network_data_ip(text: &str, id: Option<&str>) -> Result<IpAddr, String> {
    let doc = parse_network_data(text)?;
    let networks = doc["networks"]
        .as_array()
        .expect("checked by parse_network_data");
    let (label, network) = match id {
        Some(id) => (
            format!("{id:?}"),
            networks
                .iter()
                .find(|n| n.get("id").and_then(|i| i.as_str()) == Some(id))
                .ok_or_else(|| format!("networkData has no network with id {id:?}"))?,
        ),
        None => (
            "(the first with an address)".to_owned(),
            networks
                .iter()
                .find(|n| n.get("ip_address").is_some())
                .ok_or("networkData has no network with an ip_address")?,
        ),
    };
    let raw = network
        .get("ip_address")
        .and_then(|a| a.as_str())
        .ok_or_else(|| format!("network {label} has no ip_address"))?;
    let addr = raw.split('/').next().unwrap_or(raw);
    addr.parse()
        .map_err(|_| format!("network {label} has an invalid ip_address {raw:?}"))
}

/// The host part of a BareMetalHost's `spec.bmc.address`: `ipmi://10.0.0.1:623`, `redfish+https://[fd00::1]/…`,
/// `idrac-virtualmedia://bmc.example/…` or a bare `10.0.0.1`.
pub fn bmc_host(address: &str) -> Result<String, String> {
    let rest = match address.split_once("://") {
        Some((_, rest)) => rest,
        None => address,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else if authority.matches(':').count() > 1 {
        authority // a bare IPv6 address without a port
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(format!("BMC address {address:?} has no host"));
    }
    Ok(host.to_owned())
}

/// `ip:port` as HAProxy and URLs write it (IPv6 in brackets).
pub fn socket(ip: &IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

fn header(out: &mut String) {
    out.push_str(
        "# Rendered by foothold-agent (SIP); changes are overwritten.\n\
         global\n  log stdout format raw local0\n  maxconn 20000\n\n\
         defaults\n  mode tcp\n  log global\n  option tcplog\n  option dontlognull\n  \
         timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n  timeout check 5s\n",
    );
}

/// The control-plane load balancer: one TCP frontend on `listen_port`, backends on each host's Kubernetes API
/// (`api_port`), health-checked with `GET /readyz` over TLS.
pub fn haproxy_control_plane(nodes: &[Node], listen_port: u16, api_port: u16) -> String {
    let mut out = String::new();
    header(&mut out);
    let _ = write!(
        out,
        "\nfrontend control-plane\n  bind :::{listen_port} v4v6\n  default_backend control-plane\n\n\
         backend control-plane\n  balance roundrobin\n  option httpchk GET /readyz\n  \
         http-check expect status 200\n  default-server check check-ssl verify none inter 5s fall 3 rise 2\n"
    );
    for n in nodes {
        let _ = writeln!(out, "  server {} {}", n.name, socket(&n.ip, api_port));
    }
    out
}

/// The worker load balancer: for each port of `start..=end`, a TCP frontend passing to that port on every host.
pub fn haproxy_workers(nodes: &[Node], start: u16, end: u16) -> String {
    let mut out = String::new();
    header(&mut out);
    for port in start..=end {
        let _ = write!(
            out,
            "\nfrontend worker-{port}\n  bind :::{port} v4v6\n  default_backend worker-{port}\n\n\
             backend worker-{port}\n  balance roundrobin\n  default-server check inter 5s fall 3 rise 2\n"
        );
        for n in nodes {
            let _ = writeln!(out, "  server {} {}", n.name, socket(&n.ip, port));
        }
    }
    out
}

/// The jump host's `ssh_config`: one `Host` block per node, by its BareMetalHost name.
pub fn ssh_config(nodes: &[Node], user: &str, identity_file: &str) -> String {
    let mut out = String::from("# Rendered by foothold-agent (SIP); changes are overwritten.\n");
    for n in nodes {
        let _ = write!(
            out,
            "\nHost {}\n  HostName {}\n  User {user}\n  IdentityFile {identity_file}\n  \
             StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n",
            n.name, n.ip
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_data_in_json_and_yaml_ipv4_and_ipv6() {
        let json = r#"{"links": [{"id": "enp1s0", "type": "phy"}],
            "networks": [{"id": "oam-ipv4", "link": "enp1s0", "type": "ipv4", "ip_address": "10.23.25.101/24"},
                         {"id": "oam-ipv6", "link": "enp1s0", "type": "ipv6", "ip_address": "fd00:10:23::65"}]}"#;
        assert_eq!(
            network_data_ip(json, Some("oam-ipv4")).unwrap().to_string(),
            "10.23.25.101"
        );
        assert_eq!(
            network_data_ip(json, Some("oam-ipv6")).unwrap().to_string(),
            "fd00:10:23::65"
        );
        let yaml = "networks:\n- id: pxe\n  ip_address: 192.168.0.7\n- id: oam\n  ip_address: 2001:db8::7/64\n";
        assert_eq!(
            network_data_ip(yaml, Some("oam")).unwrap().to_string(),
            "2001:db8::7"
        );
        assert_eq!(
            network_data_ip(yaml, Some("nope")).unwrap_err(),
            "networkData has no network with id \"nope\""
        );
        assert_eq!(
            network_data_ip("networks:\n- id: x\n  ip_address: 10.0.0.300\n", Some("x"))
                .unwrap_err(),
            "network \"x\" has an invalid ip_address \"10.0.0.300\""
        );
        assert_eq!(
            network_data_ip("{}", Some("x")).unwrap_err(),
            "networkData has no networks list"
        );
        assert!(network_data_ip(": : :\n\t-", None)
            .unwrap_err()
            .starts_with("networkData is neither"));
    }

    #[test]
    fn bmc_hosts_from_every_address_form() {
        for (address, host) in [
            ("ipmi://10.0.0.1:623", "10.0.0.1"),
            ("ipmi://10.0.0.1", "10.0.0.1"),
            (
                "redfish+https://[fd00::1]:8443/redfish/v1/Systems/1",
                "fd00::1",
            ),
            (
                "redfish-virtualmedia://bmc.rack1.example/redfish/v1/Systems/1",
                "bmc.rack1.example",
            ),
            ("idrac-virtualmedia://user@10.1.1.1/redfish", "10.1.1.1"),
            ("10.2.2.2", "10.2.2.2"),
            ("10.2.2.2:623", "10.2.2.2"),
            ("fd00::9", "fd00::9"),
        ] {
            assert_eq!(bmc_host(address).unwrap(), host, "{address}");
        }
        assert!(bmc_host("ipmi://").is_err());
    }

    fn nodes() -> Vec<Node> {
        vec![
            Node {
                name: "node-a".into(),
                ip: "10.0.0.1".parse().unwrap(),
            },
            Node {
                name: "node-b".into(),
                ip: "fd00::2".parse().unwrap(),
            },
        ]
    }

    #[test]
    fn control_plane_config_snapshot() {
        assert_eq!(
            haproxy_control_plane(&nodes(), 30001, 6443),
            "# Rendered by foothold-agent (SIP); changes are overwritten.\n\
             global\n  log stdout format raw local0\n  maxconn 20000\n\n\
             defaults\n  mode tcp\n  log global\n  option tcplog\n  option dontlognull\n  \
             timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n  timeout check 5s\n\n\
             frontend control-plane\n  bind :::30001 v4v6\n  default_backend control-plane\n\n\
             backend control-plane\n  balance roundrobin\n  option httpchk GET /readyz\n  \
             http-check expect status 200\n  default-server check check-ssl verify none inter 5s fall 3 rise 2\n  \
             server node-a 10.0.0.1:6443\n  server node-b [fd00::2]:6443\n"
        );
    }

    #[test]
    fn worker_config_has_a_frontend_per_port() {
        let cfg = haproxy_workers(&nodes(), 30100, 30102);
        assert_eq!(cfg.matches("\nfrontend worker-").count(), 3);
        assert!(cfg.contains("backend worker-30102\n  balance roundrobin\n  default-server check inter 5s fall 3 rise 2\n  server node-a 10.0.0.1:30102\n  server node-b [fd00::2]:30102\n"));
    }

    #[test]
    fn ssh_config_snapshot() {
        assert_eq!(
            ssh_config(&nodes()[..1], "root", "/etc/foothold/ssh/id_rsa"),
            "# Rendered by foothold-agent (SIP); changes are overwritten.\n\nHost node-a\n  HostName 10.0.0.1\n  \
             User root\n  IdentityFile /etc/foothold/ssh/id_rsa\n  StrictHostKeyChecking no\n  \
             UserKnownHostsFile /dev/null\n"
        );
    }
}
