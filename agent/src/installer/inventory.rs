//! The installer's inventory: the kubespray-style INI the BPA reconciler writes into the Job's ConfigMap
//! (`hosts.ini`). Pure: text in, hosts and roles out; every error names the line and what is wrong.
//!
//! ```ini
//! [all]
//! master-0 ansible_host=10.0.0.5 ip=10.0.0.5
//! worker-0 ansible_host=10.0.0.6 ip=10.0.0.6
//!
//! [kube_control_plane]
//! master-0
//!
//! [etcd]
//! master-0
//!
//! [kube_node]
//! worker-0
//!
//! [k8s_cluster:children]
//! kube_control_plane
//! kube_node
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

/// One host: its inventory name and the address the installer reaches it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// `ansible_host`: an IP address or a DNS name.
    pub address: String,
    /// `ip`: the address the cluster's components advertise (defaults to `address`).
    pub ip: String,
    /// `ansible_port`: SSH's port (default 22).
    pub port: u16,
    /// `ansible_user`: who to log in as (default: the installer's `--ssh-user`).
    pub user: Option<String>,
}

/// The hosts and their roles. A host may be both a control-plane host and a node (a one-host cluster, or the
/// BPA's inventory when a cluster has no workers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    /// Every host of `[all]`, in its order.
    pub hosts: Vec<Host>,
    /// `[kube_control_plane]`, in its order: the first one initialises the cluster.
    pub control_plane: Vec<String>,
    /// `[kube_node]`, in its order.
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// 1-based; 0 for what is wrong with the whole file.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}", self.reason),
            n => write!(f, "line {n}: {}", self.reason),
        }
    }
}

impl std::error::Error for Error {}

/// The groups the installer reads; others (`etcd`, which is the control plane's under kubeadm, and
/// `:children` groups) are accepted and left alone.
const CONTROL_PLANE: &str = "kube_control_plane";
const NODES: &str = "kube_node";

impl Inventory {
    pub fn parse(text: &str) -> Result<Inventory, Error> {
        let err = |line: usize, reason: String| Error { line, reason };
        let mut hosts: Vec<Host> = Vec::new();
        let mut groups: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
        let mut section: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let name = rest
                    .strip_suffix(']')
                    .filter(|s| !s.is_empty() && !s.contains(['[', ']', ' ']))
                    .ok_or_else(|| err(n, format!("{line:?} is not a [group] header")))?;
                section = Some(name.to_owned());
                continue;
            }
            let Some(group) = &section else {
                return Err(err(n, format!("{line:?} comes before any [group]")));
            };
            if group.ends_with(":children") || group.ends_with(":vars") {
                continue;
            }
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default();
            check_name(name).map_err(|r| err(n, r))?;
            if group != "all" {
                if words.next().is_some() {
                    return Err(err(
                        n,
                        format!("{name}: host variables belong in [all], not [{group}]"),
                    ));
                }
                groups
                    .entry(group.clone())
                    .or_default()
                    .push((n, name.into()));
                continue;
            }
            if hosts.iter().any(|h| h.name == name) {
                return Err(err(n, format!("{name} is listed twice in [all]")));
            }
            let (mut address, mut ip, mut port, mut user) = (None, None, 22, None);
            for word in words {
                let (key, value) = word
                    .split_once('=')
                    .ok_or_else(|| err(n, format!("{name}: {word:?} is not a variable=value")))?;
                match key {
                    "ansible_host" | "ip" => {
                        check_address(value).map_err(|r| err(n, format!("{name}: {key}: {r}")))?;
                        let slot = if key == "ip" { &mut ip } else { &mut address };
                        *slot = Some(value.to_owned());
                    }
                    "ansible_port" => {
                        port = value.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                            err(n, format!("{name}: ansible_port: {value:?} is not a port"))
                        })?;
                    }
                    "ansible_user" => {
                        check_user(value)
                            .map_err(|r| err(n, format!("{name}: ansible_user: {r}")))?;
                        user = Some(value.to_owned());
                    }
                    _ => {}
                }
            }
            let address = address.ok_or_else(|| {
                err(
                    n,
                    format!("{name}: no ansible_host (the address to reach it at)"),
                )
            })?;
            hosts.push(Host {
                name: name.into(),
                ip: ip.unwrap_or_else(|| address.clone()),
                address,
                port,
                user,
            });
        }
        let mut members = |group: &str| -> Result<Vec<String>, Error> {
            let mut out = Vec::new();
            for (n, name) in groups.remove(group).unwrap_or_default() {
                if !hosts.iter().any(|h| h.name == name) {
                    return Err(err(n, format!("{name} in [{group}] is not in [all]")));
                }
                if !out.contains(&name) {
                    out.push(name);
                }
            }
            Ok(out)
        };
        let control_plane = members(CONTROL_PLANE)?;
        let nodes = members(NODES)?;
        if control_plane.is_empty() {
            return Err(err(0, format!("no host in [{CONTROL_PLANE}]")));
        }
        Ok(Inventory {
            hosts,
            control_plane,
            nodes,
        })
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The host that initialises the cluster: the first of the control plane.
    pub fn first_control_plane(&self) -> &Host {
        self.host(&self.control_plane[0])
            .expect("parse checked every member is a host")
    }

    /// The hosts the installer touches, control plane first, each once.
    pub fn members(&self) -> Vec<&Host> {
        let mut names: Vec<&String> = self.control_plane.iter().collect();
        names.extend(
            self.nodes
                .iter()
                .filter(|n| !self.control_plane.contains(n)),
        );
        names.into_iter().filter_map(|n| self.host(n)).collect()
    }
}

/// A host name as Kubernetes will name its node: lowercase letters, digits, `-` and `.`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.']);
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{name:?} is not a host name (lowercase letters, digits, '-' and '.')"
        )),
    }
}

/// A login name as Debian's adduser allows it.
fn check_user(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 32
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !value.starts_with('-');
    match ok {
        true => Ok(()),
        false => Err(format!("{value:?} is not a user name")),
    }
}

/// An IP address or a DNS name: nothing a shell or an SSH option could read as more.
fn check_address(value: &str) -> Result<(), String> {
    if value.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let dns = !value.is_empty()
        && value.len() <= 253
        && value
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        && !value.starts_with('-');
    match dns {
        true => Ok(()),
        false => Err(format!("{value:?} is not an IP address or a DNS name")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BPA: &str = "[all]\nmaster-0 ansible_host=10.0.0.5 ip=10.0.0.5\nworker-0 ansible_host=10.0.0.6 ip=10.0.0.6\n\n\
                       [kube_control_plane]\nmaster-0\n\n[etcd]\nmaster-0\n\n[kube_node]\nworker-0\n\n\
                       [k8s_cluster:children]\nkube_control_plane\nkube_node\n";

    #[test]
    fn reads_what_the_bpa_writes() {
        let inv = Inventory::parse(BPA).unwrap();
        assert_eq!(
            inv.hosts,
            vec![
                Host {
                    name: "master-0".into(),
                    address: "10.0.0.5".into(),
                    ip: "10.0.0.5".into(),
                    port: 22,
                    user: None,
                },
                Host {
                    name: "worker-0".into(),
                    address: "10.0.0.6".into(),
                    ip: "10.0.0.6".into(),
                    port: 22,
                    user: None,
                },
            ]
        );
        assert_eq!(inv.control_plane, ["master-0"]);
        assert_eq!(inv.nodes, ["worker-0"]);
        assert_eq!(inv.first_control_plane().address, "10.0.0.5");
        let members: Vec<&str> = inv.members().iter().map(|h| h.name.as_str()).collect();
        assert_eq!(members, ["master-0", "worker-0"]);
    }

    #[test]
    fn a_host_in_both_roles_is_touched_once() {
        let inv = Inventory::parse(
            "[all]\nm ansible_host=node.site\n[kube_control_plane]\nm\n[kube_node]\nm\n",
        )
        .unwrap();
        assert_eq!(inv.members().len(), 1);
        assert_eq!(inv.hosts[0].ip, "node.site", "ip defaults to ansible_host");
    }

    #[test]
    fn errors_name_the_line_and_the_reason() {
        for (text, want) in [
            (
                "m ansible_host=1.2.3.4\n",
                "line 1: \"m ansible_host=1.2.3.4\" comes before any [group]",
            ),
            (
                "[all]\nm\n[kube_control_plane]\nm\n",
                "line 2: m: no ansible_host (the address to reach it at)",
            ),
            (
                "[all]\nm ansible_host=1.2.3.4\n[kube_control_plane]\nx\n",
                "line 4: x in [kube_control_plane] is not in [all]",
            ),
            (
                "[all]\nm ansible_host=1.2.3.4\n",
                "no host in [kube_control_plane]",
            ),
            (
                "[all]\nm ansible_host=$(reboot)\n",
                "line 2: m: ansible_host: \"$(reboot)\" is not an IP address or a DNS name",
            ),
            (
                "[all]\nm ansible_host=-oProxyCommand=x\n",
                "line 2: m: ansible_host: \"-oProxyCommand=x\" is not an IP address or a DNS name",
            ),
            (
                "[all]\nM_1 ansible_host=1.2.3.4\n",
                "line 2: \"M_1\" is not a host name (lowercase letters, digits, '-' and '.')",
            ),
            (
                "[all]\nm ansible_host=1.2.3.4\nm ansible_host=1.2.3.5\n",
                "line 3: m is listed twice in [all]",
            ),
            ("[all\n", "line 1: \"[all\" is not a [group] header"),
            (
                "[all]\nm ansible_host=1.2.3.4 ansible_port=0\n",
                "line 2: m: ansible_port: \"0\" is not a port",
            ),
            (
                "[all]\nm ansible_host=1.2.3.4 ansible_user=r;oot\n",
                "line 2: m: ansible_user: \"r;oot\" is not a user name",
            ),
            (
                "[all]\nm ansible_host\n",
                "line 2: m: \"ansible_host\" is not a variable=value",
            ),
            (
                "[all]\nm ansible_host=1.2.3.4\n[kube_node]\nm ip=1.2.3.4\n",
                "line 4: m: host variables belong in [all], not [kube_node]",
            ),
        ] {
            assert_eq!(
                Inventory::parse(text).unwrap_err().to_string(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn comments_variables_and_unknown_groups_are_left_alone() {
        let inv = Inventory::parse(
            "# made by hand\n[all]\nm ansible_host=fd00::5 ansible_user=foothold ansible_port=2222 other=x\n; note\n[all:vars]\nx=1\n\
             [kube_control_plane]\nm\n[calico_rr]\nm\n",
        )
        .unwrap();
        assert_eq!(inv.hosts[0].address, "fd00::5");
        assert_eq!(
            (inv.hosts[0].port, inv.hosts[0].user.as_deref()),
            (2222, Some("foothold"))
        );
        assert!(inv.nodes.is_empty());
    }

    mod with_the_bpa {
        use super::*;
        use crate::controllers::bpa::plan::{inventory, Role, Wanted};
        use proptest::prelude::*;

        proptest! {
            /// Whatever hosts a Provisioning names, the installer reads back the BPA's inventory as written.
            #[test]
            fn the_installer_reads_every_inventory_the_bpa_writes(
                hosts in proptest::collection::btree_map("[a-z][a-z0-9-]{0,10}[a-z0-9]", (any::<bool>(), any::<[u8; 4]>()), 1..6),
            ) {
                let wanted: Vec<(Wanted, String)> = hosts
                    .iter()
                    .map(|(label, (master, ip))| {
                        let w = Wanted {
                            label: label.clone(),
                            role: if *master { Role::Master } else { Role::Worker },
                            mac: String::new(),
                            cpu: None,
                            memory: None,
                            sriov: false,
                            qat: false,
                        };
                        (w, std::net::Ipv4Addr::from(*ip).to_string())
                    })
                    .collect();
                let refs: Vec<(&Wanted, String)> = wanted.iter().map(|(w, ip)| (w, ip.clone())).collect();
                let text = inventory(&refs);
                let masters: Vec<String> =
                    wanted.iter().filter(|(w, _)| w.role == Role::Master).map(|(w, _)| w.label.clone()).collect();
                match Inventory::parse(&text) {
                    Err(e) => prop_assert!(masters.is_empty(), "{e}\n{text}"),
                    Ok(inv) => {
                        prop_assert_eq!(&inv.control_plane, &masters);
                        for (w, ip) in &wanted {
                            let h = inv.host(&w.label).unwrap();
                            prop_assert_eq!((&h.address, &h.ip), (ip, ip));
                            prop_assert_eq!(inv.nodes.contains(&w.label), w.role == Role::Worker || inv.nodes == masters);
                        }
                    }
                }
            }
        }
    }
}
