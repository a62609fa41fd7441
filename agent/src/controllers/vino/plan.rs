//! ViNO's pure planning: which VMs each node runs and their names, flavors, network data from templates, BMC
//! addresses, and the node plan's pieces. No API calls; tested from values.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use serde_json::json;

use crate::controllers::common::document::json_or_yaml;
use crate::controllers::common::Ownership;
use crate::crd::vino::{DiskDrive, Flavor, Network, VmNodeSet};
use crate::vino_plan::{DiskOptionsPlan, DiskPlan};

/// On every object the reconciler creates: the Vino's name.
pub const OWNER_LABEL: &str = "vino.airshipit.org/vino";
/// On per-node objects: the node.
pub const NODE_LABEL: &str = "vino.airshipit.org/node";
/// The annotation on a node's plan where its builder reports what it applied.
pub const STATUS_ANNOTATION: &str = "vino.airshipit.org/builder-status";
/// How the objects are marked: the Vino's name and generation.
pub const OWNERSHIP: Ownership = Ownership {
    owner_label: OWNER_LABEL,
    generation_label: "vino.airshipit.org/generation",
};
/// The Redfish port of sushy-tools on each node.
pub const REDFISH_PORT: u16 = 8000;

/// One planned VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vm {
    pub node: String,
    pub node_set: String,
    pub index: i32,
    /// `<node>-<nodeset>-<i>`: the libvirt domain and Redfish system name.
    pub name: String,
    pub bmh: String,
    /// Left out by its node set's count, kept until its host's node is drained.
    pub leaving: bool,
}

/// The VMs of `sets` on `nodes` (sorted by node, then set order, then index), and those a node set's count
/// left out that are still `held` (BareMetalHost names: a host that runs a node of a Provisioning's cluster goes
/// only once that node is drained, `bpa::hold`), marked [`Vm::leaving`].
pub fn plan_vms(
    ns: &str,
    vino: &str,
    nodes: &[String],
    sets: &[VmNodeSet],
    held: &BTreeSet<String>,
) -> Vec<Vm> {
    let mut out = Vec::new();
    for node in nodes {
        for set in sets {
            let count = set.count.max(0);
            let vm = |index: i32| {
                let name = format!("{node}-{}-{index}", set.name);
                Vm {
                    node: node.clone(),
                    node_set: set.name.clone(),
                    index,
                    bmh: dns_name(&format!("{ns}-{vino}-{name}")),
                    name,
                    leaving: index >= count,
                }
            };
            // A held host's index, if it is one of this node set's on this node beyond its count.
            let mut beyond: Vec<i32> = held
                .iter()
                .filter_map(|bmh| bmh.rsplit_once('-')?.1.parse::<i32>().ok())
                .filter(|&i| i >= count && held.contains(&vm(i).bmh))
                .collect();
            beyond.sort_unstable();
            beyond.dedup();
            out.extend((0..count).chain(beyond).map(vm));
        }
    }
    out
}

/// A DNS-1123 subdomain: lower case, invalid characters as `-`, at most 253 characters.
pub(super) fn dns_name(s: &str) -> String {
    let mut out: String = s
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    while out.ends_with(['-', '.']) {
        out.pop();
    }
    out
}

/// A VNC password: eight random letters and digits (VNC authentication uses at most eight characters).
pub fn vnc_password() -> String {
    use rand::Rng as _;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The Redfish address of `vm` on a node reachable at `ip`.
pub fn bmc_address(ip: &std::net::IpAddr, vm: &str) -> String {
    let host = match ip {
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("[{a}]"),
    };
    format!("redfish+http://{host}:{REDFISH_PORT}/redfish/v1/Systems/{vm}")
}

/// A VM's resolved size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub vcpus: i32,
    pub memory_mib: i64,
    pub root_disk_gb: i64,
    /// Guest memory backed by the host's huge pages (Airship's flavors' `hugepages`).
    pub hugepages: bool,
}

/// A flavor of Airship's `vino-flavors` ConfigMap: memory in GiB, root disk in GB. Any other field is refused
/// by name rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AirshipFlavor {
    vcpus: i32,
    memory: i64,
    root_size: i64,
    #[serde(default)]
    hugepages: bool,
}

/// The name of Airship's flavors ConfigMap, read from the Vino's namespace when `flavorsConfigMap` is not set.
pub const AIRSHIP_FLAVORS: &str = "vino-flavors";

/// A node set's flavor from Airship's `vino-flavors` data: a key `flavors` holding `{<name>: {vcpus, memory,
/// rootSize, hugepages}}`, or any key holding a document with such a `flavors` mapping (its `flavors.yaml`).
fn airship_flavor(set: &str, data: &BTreeMap<String, String>) -> Result<Size, String> {
    let wrong = |key: &str, e: String| {
        format!(
            "node set {set}: ConfigMap {AIRSHIP_FLAVORS}, key {key}: not Airship's flavors: {e}"
        )
    };
    for (key, text) in data {
        let doc: serde_json::Value = json_or_yaml(text).map_err(|e| wrong(key, e))?;
        let flavors = if key == "flavors" {
            &doc
        } else {
            match doc.get("flavors") {
                Some(f) => f,
                None => continue,
            }
        };
        let Some(f) = flavors.get(set) else { continue };
        let f: AirshipFlavor = serde_json::from_value(f.clone())
            .map_err(|e| wrong(key, format!("flavor {set}: {e}")))?;
        if f.vcpus <= 0 || f.memory <= 0 || f.root_size <= 0 {
            return Err(wrong(
                key,
                format!("flavor {set}: vcpus, memory and rootSize must be positive"),
            ));
        }
        return Ok(Size {
            vcpus: f.vcpus,
            memory_mib: f.memory * 1024,
            root_disk_gb: f.root_size,
            hugepages: f.hugepages,
        });
    }
    Err(format!(
        "node set {set}: no flavor given, and ConfigMap {AIRSHIP_FLAVORS} has no flavor named {set}"
    ))
}

/// A complete flavor: the named one from the ConfigMap (`{vcpus, memoryMiB, rootDiskGb}`, JSON or YAML), with
/// the fields the node set gives overriding it; a node set with no flavor at all takes the one named after it
/// from Airship's `vino-flavors` (`airship`: that ConfigMap's data, if it exists).
pub fn resolve_flavor(
    set: &str,
    flavor: Option<&Flavor>,
    flavors: &BTreeMap<String, String>,
    airship: Option<&BTreeMap<String, String>>,
) -> Result<Size, String> {
    let Some(given) = flavor else {
        return match airship {
            Some(data) => airship_flavor(set, data),
            None => Err(format!(
                "node set {set}: no flavor given, and no flavorsConfigMap or {AIRSHIP_FLAVORS} ConfigMap to take it from"
            )),
        };
    };
    let mut base = Flavor::default();
    if let Some(name) = &given.name {
        let text = flavors.get(name).ok_or_else(|| {
            format!("node set {set}: flavor {name} is not in the flavors ConfigMap")
        })?;
        base = json_or_yaml(text).map_err(|e| {
            format!("node set {set}: flavor {name} is not {{vcpus, memoryMiB, rootDiskGb}}: {e}")
        })?;
    }
    let vcpus = given.vcpus.or(base.vcpus);
    let memory = given.memory_mib.or(base.memory_mib);
    let disk = given.root_disk_gb.or(base.root_disk_gb);
    match (vcpus, memory, disk) {
        (Some(c), Some(m), Some(d)) if c > 0 && m > 0 && d > 0 => Ok(Size {
            vcpus: c,
            memory_mib: m,
            root_disk_gb: d,
            hugepages: false,
        }),
        _ => Err(format!(
            "node set {set}: the flavor needs positive vcpus, memoryMiB and rootDiskGb (from flavor or flavorsConfigMap)"
        )),
    }
}

/// The networkData of a VM: `template` rendered with `vars`, or OpenStack network_data JSON.
pub fn render_network_data(
    template: Option<&str>,
    vars: &serde_json::Value,
    go_vars: &serde_json::Value,
) -> Result<String, String> {
    match template {
        // Airship's templates: Go's text/template with sprig, over Airship's values.
        Some(t) if crate::gotmpl::is_go_template(t) => {
            crate::gotmpl::render(t, go_vars).map_err(|e| format!("networkData template (Go): {e}"))
        }
        Some(t) => {
            let mut env = minijinja::Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env.render_str(t, vars)
                .map_err(|e| format!("networkData template: {e}"))
        }
        None => {
            let interfaces = vars["interfaces"].as_array().cloned().unwrap_or_default();
            let links: Vec<serde_json::Value> = interfaces
                .iter()
                .map(|i| json!({"id": i["name"], "type": "phy", "ethernet_mac_address": i["mac"], "mtu": i["mtu"]}))
                .collect();
            let networks: Vec<serde_json::Value> = interfaces
                .iter()
                .map(|i| {
                    let v6 = i["ip"].as_str().is_some_and(|ip| ip.contains(':'));
                    json!({"id": i["network"], "link": i["name"], "type": if v6 { "ipv6" } else { "ipv4" },
                           "ip_address": i["ip"], "prefix": i["prefix_length"], "routes": i["routes"]})
                })
                .collect();
            let dns: BTreeSet<String> = interfaces
                .iter()
                .flat_map(|i| i["dns_servers"].as_array().cloned().unwrap_or_default())
                .filter_map(|d| d.as_str().map(str::to_owned))
                .collect();
            let services: Vec<serde_json::Value> = dns
                .iter()
                .map(|d| json!({"type": "dns", "address": d}))
                .collect();
            Ok(serde_json::to_string_pretty(
                &json!({"links": links, "networks": networks, "services": services}),
            )
            .expect("JSON values serialize"))
        }
    }
}

pub fn node_ip(node: &Node) -> Option<std::net::IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| a.address.parse().ok())
}

/// The host bridge of a Vino network: its `bridgeName`, else Airship's `vm-infra-bridge` under its
/// `management` template, else `vino-<network>`.
pub fn bridge_name(net: &Network) -> String {
    use super::airship::{MANAGEMENT_BRIDGE, MANAGEMENT_TEMPLATE};
    match (&net.bridge_name, net.libvirt_template.as_deref()) {
        (Some(b), _) => b.clone(),
        (None, Some(MANAGEMENT_TEMPLATE)) => MANAGEMENT_BRIDGE.into(),
        (None, _) => format!("vino-{}", net.name),
    }
}

pub fn disk_plan(d: &DiskDrive) -> DiskPlan {
    DiskPlan {
        name: d.name.clone(),
        kind: d.kind.clone(),
        path: d.path.clone(),
        options: d.options.as_ref().map(|o| DiskOptionsPlan {
            size_gb: o.size_gb.and_then(|g| u64::try_from(g).ok()),
            sparse: o.sparse,
        }),
    }
}

pub fn prefix_len(subnet: &str) -> Option<u32> {
    subnet.split_once('/').and_then(|(_, l)| l.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_and_bmh_names_follow_the_node_set_order() {
        let sets: Vec<VmNodeSet> = serde_json::from_value(
            json!([{"name": "master", "count": 1}, {"name": "Worker_X", "count": 2}]),
        )
        .unwrap();
        let vms = plan_vms("site", "v1", &["n1".into()], &sets, &BTreeSet::new());
        let names: Vec<(&str, &str)> = vms
            .iter()
            .map(|v| (v.name.as_str(), v.bmh.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("n1-master-0", "site-v1-n1-master-0"),
                ("n1-Worker_X-0", "site-v1-n1-worker-x-0"),
                ("n1-Worker_X-1", "site-v1-n1-worker-x-1"),
            ]
        );
        assert_eq!(
            bmc_address(&"fd00::5".parse().unwrap(), "n1-master-0"),
            "redfish+http://[fd00::5]:8000/redfish/v1/Systems/n1-master-0"
        );
    }

    #[test]
    fn a_vm_its_count_left_out_stays_while_its_host_is_held() {
        let sets: Vec<VmNodeSet> =
            serde_json::from_value(json!([{"name": "w", "count": 1}, {"name": "w-1", "count": 0}]))
                .unwrap();
        // Held: n1's w-2 (beyond the count), w-0 (within it), another node's, another set's look-alike, junk.
        let held: BTreeSet<String> = [
            "site-v1-n1-w-2",
            "site-v1-n1-w-0",
            "site-v1-n9-w-1",
            "site-v1-n1-w-1-0",
            "site-v1-n1-w-x",
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        let vms = plan_vms("site", "v1", &["n1".into()], &sets, &held);
        let names: Vec<(&str, bool)> = vms.iter().map(|v| (v.bmh.as_str(), v.leaving)).collect();
        assert_eq!(
            names,
            [
                ("site-v1-n1-w-0", false),
                ("site-v1-n1-w-2", true),
                ("site-v1-n1-w-1-0", true),
            ]
        );
    }

    #[test]
    fn flavors_come_from_the_config_map_with_overrides() {
        let flavors = BTreeMap::from([
            (
                "small".to_owned(),
                "vcpus: 2\nmemoryMiB: 4096\nrootDiskGb: 20\n".to_owned(),
            ),
            ("bad".to_owned(), "[1, 2]".to_owned()),
        ]);
        let f = |v: serde_json::Value| -> Flavor { serde_json::from_value(v).unwrap() };
        assert_eq!(
            resolve_flavor("w", Some(&f(json!({"name": "small"}))), &flavors, None).unwrap(),
            size(2, 4096, 20)
        );
        assert_eq!(
            resolve_flavor(
                "w",
                Some(&f(json!({"name": "small", "vcpus": 8}))),
                &flavors,
                None
            )
            .unwrap(),
            size(8, 4096, 20)
        );
        assert_eq!(
            resolve_flavor(
                "w",
                Some(&f(json!({"vcpus": 1, "memoryMiB": 512, "rootDiskGb": 5}))),
                &flavors,
                None
            )
            .unwrap(),
            size(1, 512, 5)
        );
        assert!(
            resolve_flavor("w", Some(&f(json!({"name": "huge"}))), &flavors, None)
                .unwrap_err()
                .contains("flavor huge is not in")
        );
        assert!(
            resolve_flavor("w", Some(&f(json!({"name": "bad"}))), &flavors, None)
                .unwrap_err()
                .contains("is not {vcpus")
        );
        assert!(
            resolve_flavor("w", Some(&f(json!({"vcpus": 1}))), &flavors, None)
                .unwrap_err()
                .contains("needs positive vcpus")
        );
        assert!(resolve_flavor("w", None, &flavors, None)
            .unwrap_err()
            .contains("no flavorsConfigMap or vino-flavors"));
    }

    fn size(vcpus: i32, memory_mib: i64, root_disk_gb: i64) -> Size {
        Size {
            vcpus,
            memory_mib,
            root_disk_gb,
            hugepages: false,
        }
    }

    #[test]
    fn a_node_set_without_a_flavor_takes_airships_flavor_named_after_it() {
        // Airship's config/manager/flavors.yaml, as the ConfigMap's file or as its `flavors` key.
        let file = "flavors:\n  master:\n    vcpus: 1\n    memory: 4\n    hugepages: true\n    rootSize: 30\n  worker:\n    vcpus: 1\n    memory: 2\n    hugepages: true\n    rootSize: 10\n";
        let as_file = BTreeMap::from([("flavors.yaml".to_owned(), file.to_owned())]);
        let as_key = BTreeMap::from([(
            "flavors".to_owned(),
            "worker: {vcpus: 1, memory: 2, rootSize: 10, hugepages: true}\n".to_owned(),
        )]);
        let none = BTreeMap::new();
        let worker = Size {
            vcpus: 1,
            memory_mib: 2048,
            root_disk_gb: 10,
            hugepages: true,
        };
        for data in [&as_file, &as_key] {
            assert_eq!(
                resolve_flavor("worker", None, &none, Some(data)).unwrap(),
                worker
            );
        }
        assert_eq!(
            resolve_flavor("master", None, &none, Some(&as_file))
                .unwrap()
                .memory_mib,
            4096
        );
        let e = resolve_flavor("edge", None, &none, Some(&as_file)).unwrap_err();
        assert!(e.contains("vino-flavors has no flavor named edge"), "{e}");
        let odd = BTreeMap::from([(
            "flavors".to_owned(),
            "worker: {vcpus: 1, memory: 2, rootSize: 10, cpuPinning: strict}\n".to_owned(),
        )]);
        let e = resolve_flavor("worker", None, &none, Some(&odd)).unwrap_err();
        assert!(e.contains("unknown field `cpuPinning`"), "{e}");
        // A flavor given in the node set wins over Airship's.
        let given: Flavor =
            serde_json::from_value(json!({"vcpus": 4, "memoryMiB": 1024, "rootDiskGb": 8}))
                .unwrap();
        assert_eq!(
            resolve_flavor("worker", Some(&given), &none, Some(&as_file)).unwrap(),
            size(4, 1024, 8)
        );
    }

    #[test]
    fn network_data_from_a_template_or_the_openstack_default() {
        let vars = json!({"name": "bmh-0", "node": "n1", "vm": "n1-w-0", "interfaces": [
            {"name": "enp1s0", "network": "oam", "mac": "52:54:00:00:00:01", "ip": "10.0.0.5", "prefix_length": 24,
             "type": "bridge", "mtu": 1500, "dns_servers": ["10.0.0.1"], "routes": []}]});
        let t = "{% for i in interfaces %}{{ i.name }} {{ i.ip }}/{{ i.prefix_length }} {{ i.mac }}\n{% endfor %}host={{ name }}";
        assert_eq!(
            render_network_data(Some(t), &vars, &json!({})).unwrap(),
            "enp1s0 10.0.0.5/24 52:54:00:00:00:01\nhost=bmh-0"
        );
        assert!(render_network_data(Some("{{ nope }}"), &vars, &json!({}))
            .unwrap_err()
            .starts_with("networkData template:"));
        let d: serde_json::Value =
            serde_json::from_str(&render_network_data(None, &vars, &json!({})).unwrap()).unwrap();
        assert_eq!(d["networks"][0]["ip_address"], "10.0.0.5");
        assert_eq!(d["networks"][0]["type"], "ipv4");
        assert_eq!(d["links"][0]["ethernet_mac_address"], "52:54:00:00:00:01");
        assert_eq!(d["services"][0]["address"], "10.0.0.1");
        // The SIP reconciler reads it back.
        assert_eq!(
            crate::controllers::sip::configs::network_data_ip(
                &render_network_data(None, &vars, &json!({})).unwrap(),
                Some("oam")
            )
            .unwrap()
            .to_string(),
            "10.0.0.5"
        );
    }
}
